package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/syncbuf"
	"github.com/scavenger-ml/scavenger/internal/testnats"
	"github.com/scavenger-ml/scavenger/internal/testnet"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// clusterNode is one node's scavd in a namespace host of a cluster test.
type clusterNode struct {
	name, ns, state string
	args            []string
	cmd             *exec.Cmd
	log             *syncbuf.Buffer
}

// start runs the node's scavd (binary bin) in its namespace and waits
// until it answers.
func (n *clusterNode) start(bin string) (*api.Client, error) {
	n.cmd = exec.Command("ip", append([]string{"netns", "exec", n.ns, bin}, n.args...)...)
	n.log = &syncbuf.Buffer{}
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		return nil, err
	}
	// Three servers on two cores form JetStream's meta group, then a raft
	// group for each of the dozen streams and buckets: up to scavd's own
	// wait for its cluster (clusterWait, 2 minutes), and a little more.
	for deadline := time.Now().Add(150 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if info, err := api.ReadDiscovery(n.state); err == nil && info.PID == n.cmd.Process.Pid {
			if c, err := api.Dial(context.Background(), info.API, 5*time.Second); err == nil {
				return c, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("node %s's scavd did not come up:\n%s", n.name, n.log.String())
		}
	}
}

// stop ends the node's scavd with sig and reaps it.
func (n *clusterNode) stop(sig syscall.Signal) {
	if n.cmd == nil || n.cmd.ProcessState != nil {
		return
	}
	_ = n.cmd.Process.Signal(sig)
	_ = n.cmd.Wait()
}

// stepWorker writes a step record every 20 ms, bound to its attempt, until
// the file stop exists in its working directory.
const stepWorker = `import json, os, socket, time
e = os.environ
s = socket.socket(socket.AF_UNIX); s.connect(e["SCAV_SOCKET"])
head = {"v": 1, "job": e["SCAV_JOB_ID"], "attempt": int(e["SCAV_ATTEMPT"]), "rank": int(e["RANK"]), "world": int(e["WORLD_SIZE"])}
s.sendall((json.dumps(dict(head, kind="hello", step=0, t=time.time(), token=e["SCAV_TOKEN"])) + "\n").encode())
step = 0
while not os.path.exists("stop"):
    step += 1
    s.sendall((json.dumps(dict(head, step=step, t=time.time(), dt=0.02, samples=8)) + "\n").encode())
    time.sleep(0.02)
`

// TestClusterOfThreeNodes runs a scavd in each of three namespace nodes,
// their embedded NATS servers one cluster (routes over TLS, verified both
// ways, authenticated by the shared key), streams and buckets in three
// copies. A job runs on node 1; node 2's scavd (and its NATS server) is
// killed: every record stored before the kill stays readable, the cluster
// keeps serving (node 3 sees the job, and stops it through node 1), and
// node 2 rejoins and catches up.
func TestClusterOfThreeNodes(t *testing.T) {
	tn := testnet.New(t, 3)
	dir := sharedDir(t)
	var ips []string
	for _, h := range tn.Hosts {
		ips = append(ips, h.Addr)
	}
	ca, cert, key := selfSigned(t, dir, ips...)
	seed, _ := testnats.Key(t)
	nodes := make([]*clusterNode, 3)
	for i, h := range tn.Hosts {
		n := &clusterNode{name: fmt.Sprintf("node%d", i+1), ns: h.NS, state: filepath.Join(dir, fmt.Sprintf("n%d", i+1))}
		n.args = []string{"--state-dir", n.state, "--node", n.name, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--node-sample-every", "0",
			"--nats-key", seed, "--replicas", "3", "--cluster-listen", h.Addr + ":6222",
			"--cluster-tls-cert", cert, "--cluster-tls-key", key, "--cluster-tls-ca", ca, "--log-level", "warn"}
		for j, o := range tn.Hosts {
			if j != i {
				n.args = append(n.args, "--cluster-route", "nats-route://"+o.Addr+":6222")
			}
		}
		nodes[i] = n
	}
	t.Cleanup(func() { // before testnet's, which wants the namespaces empty
		for _, n := range nodes {
			n.stop(syscall.SIGTERM)
			if t.Failed() && n.log != nil {
				t.Logf("%s's scavd:\n%s", n.name, n.log.String())
			}
		}
	})
	// The three come up together: JetStream waits for its peers.
	bin := scavdBinary(t)
	clients := make([]*api.Client, 3)
	errs := make(chan error, 3)
	for i := range nodes {
		go func() {
			var err error
			clients[i], err = nodes[i].start(bin)
			errs <- err
		}()
	}
	for range nodes {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for _, c := range clients {
		if c != nil {
			defer c.Close()
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	ctx := t.Context()
	job, err := clients[0].Run(ctx, api.RunRequest{Name: "clustered", Command: []string{pythonBin, "-c", stepWorker}, Dir: dir,
		Config: plugins.Config{Workers: 1}, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	// count reads the job's records through c; a cluster that just lost a
	// server may take seconds to elect new stream leaders, so it tries again.
	count := func(c *api.Client) (n int, last int64) {
		var err error
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
			n, last = 0, 0
			if err = c.Steps(ctx, job.ID, false, func(r telemetry.StepRecord) error {
				n++
				last = max(last, r.Step)
				return nil
			}); err == nil {
				return n, last
			}
		}
		t.Fatalf("steps of %s: %v", job.ID, err)
		return 0, 0
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if n, _ := count(clients[0]); n >= 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s stored no 50 steps on node 1", job.ID)
		}
	}
	stored, _ := count(clients[0])
	nodes[1].stop(syscall.SIGKILL)
	time.Sleep(2 * time.Second) // the job goes on writing, to the two servers left

	// Node 3 sees the job and everything stored before the kill, and can stop it.
	readable, last := count(clients[2])
	if readable < stored {
		t.Errorf("node 3 reads %d records of %s after node 2's kill; %d were stored before it", readable, job.ID, stored)
	}
	if int64(readable) != last {
		t.Errorf("node 3 reads %d records up to step %d: some are missing or doubled", readable, last)
	}
	if _, err := clients[2].Stop(ctx, job.ID, 0); err != nil {
		t.Fatalf("stop %s from node 3: %v", job.ID, err)
	}
	_ = os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
	var final api.Job
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if final, err = clients[2].Job(ctx, job.ID); err == nil && final.State.Done() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s did not end: %+v (%v)", job.ID, final, err)
		}
	}
	// Node 2 rejoins and catches up.
	if clients[1], err = nodes[1].start(bin); err != nil {
		t.Fatal(err)
	}
	defer clients[1].Close()
	want, _ := count(clients[2])
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if got, _ := count(clients[1]); got == want {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("node 2 reads %d records after rejoining, node 3 %d", got, want)
		}
	}
	all, err := clients[1].AllJobs(ctx)
	if err != nil || !strings.Contains(fmt.Sprint(all), job.ID) {
		t.Errorf("node 2's jobs after rejoining: %v (%v)", all, err)
	}
	t.Logf("records stored before node 2's kill: %d, all readable on node 3 after it (%d by then, steps 1..%d, none doubled); %d in all, the same on the rejoined node 2; job %s",
		stored, readable, last, want, final.State)
}
