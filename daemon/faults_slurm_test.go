package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/nsmachine"
	"github.com/scavenger-ml/scavenger/internal/subreaper"
	"github.com/scavenger-ml/scavenger/internal/testnet"
	"github.com/scavenger-ml/scavenger/internal/testslurm"
	"github.com/scavenger-ml/scavenger/launchers/slurm"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// slurmCluster starts a real cluster of three namespace nodes (skipping
// the test where it cannot) and a daemon whose launcher submits every
// attempt to it as a batch job; the daemon stops before the cluster, and
// once the cluster is gone the test process is no longer the subreaper
// that testslurm made it, so that the tests after it count their zombies
// as before.
func slurmCluster(t *testing.T) (*testslurm.Cluster, *api.Client) {
	t.Helper()
	if testslurm.Available() == nil {
		t.Cleanup(func() {
			if err := subreaper.Leave(); err != nil {
				t.Error(err)
			}
		})
	}
	cl := testslurm.Start(t, testslurm.Options{Nodes: 3, CPUs: 4})
	return cl, slurmDaemon(t, cl, "")
}

// slurmDaemon starts a daemon whose launcher runs every attempt on cl: as
// a step of allocation alloc, or submitted as a batch job when alloc is
// empty; it stops when the test ends.
func slurmDaemon(t *testing.T, cl *testslurm.Cluster, alloc string) *api.Client {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	l, err := slurm.New(slurm.Options{Logger: log, JobID: alloc, Env: []string{"SLURM_CONF=" + cl.Conf, "OMP_NUM_THREADS=1"},
		Grace: 2 * time.Second, PollInterval: 200 * time.Millisecond, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	_, c := faultDaemon(t, Config{StateDir: t.TempDir(), Launcher: l, NodeSampleEvery: -1})
	return c
}

// runOnNodes runs faultWorker (see submitWorkers) as 2 workers on 2 nodes.
func runOnNodes(t *testing.T, c *api.Client, python, side string, total, every int) api.Job {
	t.Helper()
	j, err := c.Run(context.Background(), api.RunRequest{
		Command: []string{python, "-c", faultWorker, strconv.Itoa(total), strconv.Itoa(every), "0", side},
		Dir:     side, Config: plugins.Config{Workers: 2, Nodes: 2}, Grace: api.Duration(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// nodeOf returns the index of the node whose namespace process pid runs in.
func nodeOf(t *testing.T, cl *testslurm.Cluster, pid int) int {
	t.Helper()
	for i := range cl.Nodes {
		if slices.ContainsFunc(cl.Net.Procs(i), func(p testnet.Proc) bool { return p.PID == pid }) {
			return i
		}
	}
	t.Fatalf("pid %d runs on none of the nodes %v", pid, cl.Nodes)
	return -1
}

// awaitCheckpoint waits until the job's manifest names a checkpoint.
func awaitCheckpoint(t *testing.T, j api.Job) {
	t.Helper()
	waitFor(t, time.Minute, "the first checkpoint", func() bool {
		_, err := os.Stat(filepath.Join(j.CheckpointDir, "latest.json"))
		return err == nil
	})
}

// slurmNodeLostTrial runs 2 workers on 2 of 3 Slurm nodes, loses the node
// of rank 1 (its link down, its processes frozen) after the first
// checkpoint: Slurm marks it DOWN, the launcher names it in LostHosts, and
// the daemon relaunches the job on the two others from its checkpoint,
// where it finishes. The node then comes back, and Slurm ends what still
// ran there before the job's processes are counted. The figure is the time
// from the loss to the relaunched workers' start.
func slurmNodeLostTrial(t *testing.T, python string) trialResult {
	const total, every = 400, 40
	cl, c := slurmCluster(t)
	j, lost, n0, n1, again := loseRank1Node(t, cl, c, python, total, every)
	final := follow(t, c, j.ID, 3*time.Minute)
	j, err := c.Job(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.RestoreNode(ctx, lost); err != nil {
		t.Error(err)
	}
	waitFor(t, 30*time.Second, "Slurm to end what ran on the lost node", func() bool {
		procs, _, _ := leftovers(j)
		return procs == 0
	})
	r := trialResult{ok: j.State == api.StateSucceeded && final.ExitCode != nil && *final.ExitCode == 0 && len(j.Attempts) == 2 &&
		n0 != lost && n1 != lost && n0 != n1,
		figure: again.Seconds(),
		note: fmt.Sprintf("lost %s; attempt 2 on %s and %s %.1f s later; %s: %s", cl.Nodes[lost], cl.Nodes[n0], cl.Nodes[n1],
			again.Seconds(), j.State, j.Message)}
	if n := reapSlurmOrphans(); n > 0 {
		t.Logf("reaped %d zombies slurmd orphaned", n)
	}
	settle(t, c, j, total, &r)
	return r
}

// loseRank1Node runs faultWorker as 2 workers on 2 nodes, loses the node of
// rank 1 after the first checkpoint, and waits for the second attempt's
// workers: it returns the job, the lost node, the nodes of attempt 2's ranks
// and the time from the loss to their start.
func loseRank1Node(t *testing.T, cl *testslurm.Cluster, c *api.Client, python string, total, every int) (j api.Job, lost, n0, n1 int, again time.Duration) {
	t.Helper()
	side := t.TempDir()
	j = runOnNodes(t, c, python, side, total, every)
	workerPid(t, side, 0, 1)
	pid := workerPid(t, side, 1, 1)
	awaitCheckpoint(t, j)
	lost = nodeOf(t, cl, pid)
	begin := time.Now()
	if err := cl.LoseNode(lost); err != nil {
		t.Fatal(err)
	}
	p0, p1 := workerPid(t, side, 0, 2), workerPid(t, side, 1, 2)
	again = time.Since(begin)
	return j, lost, nodeOf(t, cl, p0), nodeOf(t, cl, p1), again
}

// slurmClients are the commands the launcher runs as the daemon's children
// when it submits every attempt (srun runs in the batch jobs only).
var slurmClients = []string{"sbatch", "scontrol", "scancel", "sinfo"}

// reapSlurmOrphans reaps the zombies among this process's children that
// slurmd orphaned (slurmstepd and job processes, re-parented to the test
// process, which testslurm makes a child subreaper) and returns how many:
// on a machine whose PID 1 reaps they would never be this process's. The
// daemon's own children, the Slurm commands its launcher runs, are left
// for it to reap, so that the trial still counts what it fails to.
func reapSlurmOrphans() int {
	var orphans []nsmachine.Proc
	stats, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, f := range stats {
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		comm, err := os.ReadFile(f)
		if err != nil || slices.Contains(slurmClients, strings.TrimSpace(string(comm))) {
			continue
		}
		if state, ppid, ok := nsmachine.ProcState(pid); ok && state == "Z" && ppid == os.Getpid() {
			orphans = append(orphans, nsmachine.Proc{PID: pid})
		}
	}
	return len(orphans) - len(nsmachine.SettleGone(orphans, time.Second))
}

// TestSlurmMultiNode runs jobs of real python workers (faultWorker) through
// the daemon on one 3-node Slurm cluster: moves of 2 nodes -> 1 -> 2, and a
// requeue across nodes.
func TestSlurmMultiNode(t *testing.T) {
	python := testPython()
	cl, c := slurmCluster(t)
	t.Run("Moves", func(t *testing.T) { testSlurmMoves(t, cl, c, python) })
	t.Run("RequeueAcrossNodes", func(t *testing.T) { testSlurmRequeue(t, cl, c, python) })
	// Last: it loses a node.
	t.Run("NodeLostInAllocation", func(t *testing.T) { testSlurmNodeLostInAllocation(t, cl, python) })
}

// testSlurmNodeLostInAllocation runs the job as steps of an allocation of
// the three nodes that survives a node failure (--no-kill), through a
// daemon of its own, and loses the node of rank 1 after the first
// checkpoint: srun reports the node failure, the launcher names the node
// in LostHosts, Slurm takes it out of the allocation, and the daemon
// relaunches the job as a step on the two nodes left, from the checkpoint,
// where it finishes with no step record lost or stored twice.
func testSlurmNodeLostInAllocation(t *testing.T, cl *testslurm.Cluster, python string) {
	const total, every = 400, 40
	c := slurmDaemon(t, cl, cl.HoldNoKill(t, 2))
	j, lost, n0, n1, again := loseRank1Node(t, cl, c, python, total, every)
	j = finished(t, c, j.ID, 2)
	if n0 == lost || n1 == lost || n0 == n1 {
		t.Errorf("attempt 2 on %s and %s (lost %s)", cl.Nodes[n0], cl.Nodes[n1], cl.Nodes[lost])
	}
	nlost, dup, repeated := countSteps(t, c, j.ID, 2, total)
	if nlost > 0 || dup > 0 {
		t.Errorf("step records: %d lost, %d stored twice", nlost, dup)
	}
	t.Logf("lost %s: attempt 2 (%s) on %s and %s %.1f s later; %d steps done again since the checkpoint; %s",
		cl.Nodes[lost], j.Attempts[1].Handle, cl.Nodes[n0], cl.Nodes[n1], again.Seconds(), repeated, j.Attempts[0].EndReason)
}

// testSlurmMoves moves a job from 2 workers on 2 nodes to 1 worker on 1
// node and back through the daemon's API: each attempt starts from the
// checkpoint the previous one wrote when asked to move, so rank 0 does
// every step exactly once; the 2-node attempts run on two different nodes.
func testSlurmMoves(t *testing.T, cl *testslurm.Cluster, c *api.Client, python string) {
	const total, every = 1500, 40
	side := t.TempDir()
	j := runOnNodes(t, c, python, side, total, every)
	ctx := context.Background()
	one, two := plugins.Config{Workers: 1, Nodes: 1}, plugins.Config{Workers: 2, Nodes: 2}
	var nodes []string
	for attempt, next := range []*plugins.Config{&one, &two, nil} {
		attempt++
		p0 := workerPid(t, side, 0, attempt)
		n := cl.Nodes[nodeOf(t, cl, p0)]
		if attempt != 2 {
			p1 := workerPid(t, side, 1, attempt)
			if m := cl.Nodes[nodeOf(t, cl, p1)]; m == n {
				t.Errorf("attempt %d: both ranks on %s", attempt, n)
			} else {
				n += "+" + m
			}
		}
		nodes = append(nodes, n)
		if next == nil {
			break
		}
		awaitCheckpoint(t, j)
		// A job is moved by asking its workers, which the daemon knows it
		// can once it has a step record of the attempt.
		waitFor(t, time.Minute, fmt.Sprintf("a step record of attempt %d", attempt), func() bool {
			last, ok, err := c.LastStep(ctx, j.ID)
			return err == nil && ok && last.Attempt == attempt
		})
		if _, err := c.Move(ctx, j.ID, *next, "test"); err != nil {
			t.Fatalf("move to %+v: %v", *next, err)
		}
	}
	j = finished(t, c, j.ID, 3)
	spans, count := rank0Steps(t, c, j.ID)
	for s := int64(1); s <= total; s++ {
		if count[s] != 1 {
			t.Errorf("rank 0 step %d recorded %d times", s, count[s])
		}
	}
	for a := 2; a <= 3; a++ {
		if spans[a] == nil || spans[a-1] == nil || spans[a].first != spans[a-1].last+1 {
			t.Errorf("attempt %d starts at %+v after attempt %d's %+v", a, spans[a], a-1, spans[a-1])
		}
	}
	t.Logf("attempts on %v; rank 0's steps %+v %+v %+v", nodes, *spans[1], *spans[2], *spans[3])
}

// testSlurmRequeue drains the node of rank 0 of a running 2-node job and
// requeues the job (scontrol requeue, as an administrator or a pre-emption
// with requeue would): the launcher releases it from its BeginTime hold, it
// runs again within the same attempt on the two other nodes, and its
// workers resume from the newest checkpoint (the python client reads the
// manifest when SLURM_RESTART_COUNT > 0), so no step up to that checkpoint
// is done twice and none is lost. The steps done again since the
// checkpoint carry the same attempt number as their first run: they are
// logged, not asserted.
func testSlurmRequeue(t *testing.T, cl *testslurm.Cluster, c *api.Client, python string) {
	const total, every = 600, 40
	ctx := context.Background()
	side := t.TempDir()
	j := runOnNodes(t, c, python, side, total, every)
	p0 := workerPid(t, side, 0, 1)
	workerPid(t, side, 1, 1)
	awaitCheckpoint(t, j)
	drained := cl.Nodes[nodeOf(t, cl, p0)]
	if _, err := cl.Run(ctx, "scontrol", "update", "NodeName="+drained, "State=DRAIN", "Reason=scavenger-test"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cl.Run(context.Background(), "scontrol", "update", "NodeName="+drained, "State=RESUME") })
	j, err := c.Job(ctx, j.ID)
	if err != nil || len(j.Attempts) != 1 || j.Attempts[0].Handle == "" {
		t.Fatalf("job %+v, %v", j, err)
	}
	b, err := os.ReadFile(filepath.Join(j.CheckpointDir, "latest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct{ Step int64 }
	if err := json.Unmarshal(b, &manifest); err != nil || manifest.Step < every {
		t.Fatalf("manifest %s: %v", b, err)
	}
	begin := time.Now()
	if _, err := cl.Run(ctx, "scontrol", "requeue", j.Attempts[0].Handle); err != nil {
		t.Fatal(err)
	}
	var again int
	waitFor(t, time.Minute, "rank 0 to run again", func() bool {
		b, _ := os.ReadFile(filepath.Join(side, "pid-0-1"))
		again, _ = strconv.Atoi(string(b))
		return again > 0 && again != p0
	})
	took := time.Since(begin)
	node := cl.Nodes[nodeOf(t, cl, again)]
	j = finished(t, c, j.ID, 1)
	if node == drained {
		t.Errorf("the requeued job's rank 0 ran again on the drained node %s", node)
	}
	_, count := rank0Steps(t, c, j.ID)
	twice := 0
	for s := int64(1); s <= total; s++ {
		switch {
		case count[s] == 0:
			t.Errorf("rank 0 step %d never recorded", s)
		case count[s] > 1 && s <= manifest.Step:
			t.Errorf("rank 0 step %d, before the checkpoint of step %d, recorded %d times", s, manifest.Step, count[s])
		case count[s] > 1:
			twice++
		}
	}
	t.Logf("requeued after the checkpoint of step %d (or later): rank 0 ran again on %s (first on %s, drained) %.1f s later; "+
		"%d of its steps were done again since the checkpoint", manifest.Step, node, drained, took.Seconds(), twice)
}

// finished follows job id to its end and checks that it succeeded in
// attempts attempts.
func finished(t *testing.T, c *api.Client, id string, attempts int) api.Job {
	t.Helper()
	final := follow(t, c, id, 3*time.Minute)
	j, err := c.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != api.StateSucceeded || final.ExitCode == nil || *final.ExitCode != 0 || len(j.Attempts) != attempts {
		t.Fatalf("job %s: %s, %d attempts (want %d): %s", j.ID, j.State, len(j.Attempts), attempts, j.Message)
	}
	return j
}

// stepSpan is the first and last step of an attempt.
type stepSpan struct{ first, last int64 }

// rank0Steps reads job id's step records of rank 0: each attempt's span
// and how many times each step was recorded.
func rank0Steps(t *testing.T, c *api.Client, id string) (map[int]*stepSpan, map[int64]int) {
	t.Helper()
	spans, count := map[int]*stepSpan{}, map[int64]int{}
	if err := c.Steps(context.Background(), id, false, func(r telemetry.StepRecord) error {
		if r.Rank != 0 {
			return nil
		}
		count[r.Step]++
		if s := spans[r.Attempt]; s == nil {
			spans[r.Attempt] = &stepSpan{r.Step, r.Step}
		} else {
			s.first, s.last = min(s.first, r.Step), max(s.last, r.Step)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return spans, count
}
