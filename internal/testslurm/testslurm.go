// Package testslurm starts a private, real Slurm cluster for tests: its own
// munged, slurmctld and slurmd, each a child of the test process, with a
// slurm.conf on free ports in a directory of its own, so that several test
// packages can run clusters at the same time.
//
//	c := testslurm.Start(t, testslurm.Options{})
//	out, err := c.Run(ctx, "sinfo", "-h")   // SLURM_CONF points at this cluster
//
// By default the cluster has one node, "localhost". With Options.Nodes > 1
// every node is a host of internal/testnet (a network namespace on a
// private bridge, with its own address and hostname) that runs its own
// slurmd, with its own NodeName and NodeAddr; slurmctld, munged and the
// Slurm commands of the test run in this (the root) namespace and reach the
// nodes over the bridge (slurmctld listens on the bridge's address). The
// nodes share this machine's filesystem: the cluster's directory, munge's
// socket and every work directory are shared, as on a cluster with a
// shared file system. Such a cluster notices a lost node within seconds
// (SlurmdTimeout=4, MessageTimeout=2, TCPTimeout=2; measured: DOWN 10–13 s
// after the loss, where the default SlurmdTimeout would take 300 s):
// LoseNode cuts a node's link and freezes it, RestoreNode brings it back.
//
// The cluster is torn down by t.Cleanup: every job is cancelled, the
// daemons are shut down (scontrol shutdown, then munged by its PID), every
// process of the cluster is reaped — the test process makes itself a child
// subreaper so that the slurmstepd and job processes that slurmd orphans
// become its children — and the cleanup fails the test if any daemon,
// slurmstepd or job process of the cluster is left, even as a zombie.
//
// StartScript starts the one-node cluster with the repository's
// deploy/slurm/dev-cluster.sh instead (what `make slurm-dev` runs), torn
// down the same way.
//
// Start skips the test (with a message naming the apt command) when it is
// not run as root or when the Slurm or munge binaries are absent.
package testslurm

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/internal/subreaper"
	"github.com/scavenger-ml/scavenger/internal/testnet"
)

// AptInstall is the command that installs what the clusters need.
const AptInstall = "DEBIAN_FRONTEND=noninteractive apt-get install -y slurm-wlm munge"

// Options configure a cluster.
type Options struct {
	// CPUs is the node's CPU count as Slurm sees it (default 8); it may be
	// larger than the machine's, thanks to SlurmdParameters=config_overrides.
	CPUs int
	// Prolog and Epilog are executable scripts slurmd runs around every job
	// (PrologFlags=Alloc runs the prolog at allocation time); empty: none.
	Prolog, Epilog string
	// KillWait is Slurm's KillWait, the time between SIGTERM and SIGKILL
	// when a job or step is cancelled (default 2 s).
	KillWait time.Duration
	// ExtraConf is appended to slurm.conf.
	ExtraConf string
	// StartTimeout bounds waiting for the nodes to be idle (default 30 s).
	StartTimeout time.Duration
	// Nodes is the number of nodes (default 1: the node is "localhost",
	// in this namespace); more than one makes a cluster of namespace nodes
	// (see the package comment), each with CPUs CPUs.
	Nodes int
}

// Cluster is a running private cluster.
type Cluster struct {
	// Dir holds the configuration, state, spool, logs and munge files.
	Dir string
	// Conf is the path of slurm.conf.
	Conf string
	// Node is the (first) node's name, Partition the (default) partition's.
	Node, Partition string
	// Nodes are every node's name (NodeName, and the node's hostname on a
	// cluster of namespace nodes), in the order of Net.Hosts.
	Nodes []string
	// CPUs is each node's CPU count.
	CPUs int
	// Net holds the namespace hosts the nodes run on; nil on one node.
	Net *testnet.Net

	t       testing.TB
	env     []string
	munged  *exec.Cmd
	ctld    *exec.Cmd
	slurmds []*exec.Cmd
	mungeS  string
	starts  map[*exec.Cmd]uint64 // the daemons' start times
	tag     string
	stopped sync.Once
	// script is the script that started the cluster (StartScript), which
	// stops it too; empty: the daemons are the test's children.
	script string

	mu   sync.Mutex
	lost map[int]bool // the nodes LoseNode lost and RestoreNode did not bring back
}

// daemons are the programs a cluster runs; clients are the commands tests use.
var (
	daemons = []string{"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd"}
	clients = []string{"sinfo", "squeue", "scontrol", "scancel", "srun", "sbatch", "munge"}
)

// Available reports why clusters cannot be started here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("a private Slurm cluster needs root (uid %d)", os.Geteuid())
	}
	for _, d := range daemons {
		if _, err := os.Stat(d); err != nil {
			return fmt.Errorf("%s is absent (%s): %w", d, AptInstall, err)
		}
	}
	for _, c := range clients {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("%s is not on PATH (%s): %w", c, AptInstall, err)
		}
	}
	return nil
}

// Start starts a cluster and registers its teardown with t.Cleanup; it
// skips the test when Available reports a problem.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	if opts.CPUs <= 0 {
		opts.CPUs = 8
	}
	if opts.KillWait <= 0 {
		opts.KillWait = 2 * time.Second
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 30 * time.Second
	}
	var tn *testnet.Net
	if opts.Nodes > 1 {
		// Made first: its cleanup then runs after the cluster's.
		tn = testnet.New(t, opts.Nodes)
	}
	// Orphans of slurmd (slurmstepd, job processes) become our children.
	if err := subreaper.Become(); err != nil {
		t.Fatalf("testslurm: become subreaper: %v", err)
	}
	dir := t.TempDir()
	if len(dir) > 60 { // unix socket paths are short (108 bytes with slurmd's names)
		d, err := os.MkdirTemp("", "slurm")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		dir = d
	}
	c := &Cluster{
		Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), Node: "localhost", Partition: "debug", Net: tn,
		CPUs: opts.CPUs, t: t, mungeS: filepath.Join(dir, "munge.sock"), starts: map[*exec.Cmd]uint64{},
	}
	c.Nodes = []string{c.Node}
	if tn != nil {
		c.Nodes = nil
		for _, h := range tn.Hosts {
			c.Nodes = append(c.Nodes, h.Name)
		}
		c.Node = c.Nodes[0]
	}
	c.tag = "SCAV_TESTSLURM=" + dir
	c.env = append(os.Environ(), "SLURM_CONF="+c.Conf)
	for _, d := range []string{"state", "spool"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if tn != nil {
		for _, n := range c.Nodes { // each namespace node's own spool
			if err := os.MkdirAll(filepath.Join(dir, "spool", n), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	key := make([]byte, 1024)
	_, _ = rand.Read(key)
	if err := os.WriteFile(filepath.Join(dir, "munge.key"), key, 0o400); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)

	c.munged = c.daemon(t, "munged", exec.Command("/usr/sbin/munged", "--foreground", "--force",
		"--socket="+c.mungeS, "--key-file="+filepath.Join(dir, "munge.key"),
		"--pid-file="+filepath.Join(dir, "munged.pid"), "--seed-file="+filepath.Join(dir, "munged.seed"),
		"--log-file="+filepath.Join(dir, "munged.log"), "--num-threads=2"))
	c.poll(t, 10*time.Second, "munged socket", func() error {
		_, err := os.Stat(c.mungeS)
		return err
	})

	ctldPort, slurmdPort := freePort(t), freePort(t)
	if err := os.WriteFile(c.Conf, []byte(c.render(opts, ctldPort, slurmdPort)), 0o644); err != nil {
		t.Fatal(err)
	}
	c.ctld = c.daemon(t, "slurmctld", exec.Command("/usr/sbin/slurmctld", "-D", "-i", "-f", c.Conf))
	if tn == nil {
		c.slurmds = []*exec.Cmd{c.daemon(t, "slurmd", exec.Command("/usr/sbin/slurmd", "-D", "-N", c.Node, "-f", c.Conf))}
	} else {
		for i, n := range c.Nodes {
			c.slurmds = append(c.slurmds, c.daemon(t, "slurmd-"+n, tn.Command(i, "/usr/sbin/slurmd", "-D", "-N", n, "-f", c.Conf)))
		}
	}
	c.poll(t, opts.StartTimeout, "nodes idle", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		states, err := c.NodeStates(ctx)
		if err != nil {
			return err
		}
		for _, n := range c.Nodes {
			switch s := states[n]; s {
			case "idle", "mixed", "allocated":
			default:
				return fmt.Errorf("node %s state %q", n, s)
			}
		}
		return nil
	})
	return c
}

// StartScript starts a one-node cluster with script, the repository's
// deploy/slurm/dev-cluster.sh (what `make slurm-dev` runs), as a service of
// the machine rather than children of the test, but in a directory and on
// ports of the test's; the script stops it at the teardown, and the
// teardown checks, as Start's, that nothing of the cluster is left. The
// cluster is Start's single node: "localhost" with 8 CPUs in "debug".
func StartScript(t testing.TB, script string) *Cluster {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	// The daemons fork away from the script: as orphans they become ours.
	if err := subreaper.Become(); err != nil {
		t.Fatalf("testslurm: become subreaper: %v", err)
	}
	dir, err := os.MkdirTemp("", "slurmdev")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	c := &Cluster{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), Node: "localhost", Nodes: []string{"localhost"}, Partition: "debug",
		CPUs: 8, t: t, mungeS: filepath.Join(dir, "munge.sock"), starts: map[*exec.Cmd]uint64{}, script: script}
	c.tag = "SCAV_TESTSLURM=" + dir
	c.env = append(os.Environ(), "SLURM_CONF="+c.Conf, "SCAV_SLURM_DEV_DIR="+dir, "SCAV_SLURM_DEV_CPUS=8",
		fmt.Sprintf("SCAV_SLURM_DEV_PORTS=%d %d", freePort(t), freePort(t)), c.tag)
	t.Cleanup(c.stop)
	if out, err := c.runScript("start"); err != nil {
		t.Fatalf("testslurm: %s start: %v\n%s\n%s", script, err, out, c.Logs())
	}
	return c
}

// runScript runs the cluster's script with arg.
func (c *Cluster) runScript(arg string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", c.script, arg)
	cmd.Env = c.env
	return cmd.CombinedOutput()
}

// NodeStates returns each node's state as sinfo prints it (%T: "idle",
// "allocated", "down*", ...; a trailing "*" means not responding).
func (c *Cluster) NodeStates(ctx context.Context) (map[string]string, error) {
	out, err := c.Run(ctx, "sinfo", "-h", "-N", "-o", "%N %T")
	if err != nil {
		return nil, err
	}
	states := map[string]string{}
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) == 2 {
			states[f[0]] = f[1]
		}
	}
	return states, nil
}

// LoseNode makes node i (an index of Nodes) lost, as a machine whose
// network dies: its link goes down and every process on it is frozen
// (the namespace nodes share this machine's filesystem and unix sockets,
// which a cut-off machine would not reach). It needs a cluster of
// namespace nodes. The node stays lost until RestoreNode, or until the
// teardown, which powers it off: every process of the cluster on it
// (slurmd, slurmstepd, the job's) is killed before its link comes back.
func (c *Cluster) LoseNode(i int) error {
	if c.Net == nil {
		return fmt.Errorf("lose node %d: a cluster of one node has no namespace nodes", i)
	}
	if err := c.Net.LinkDown(i); err != nil {
		return fmt.Errorf("lose node %s: %w", c.Nodes[i], err)
	}
	if err := c.Net.Freeze(i); err != nil {
		return fmt.Errorf("lose node %s: %w", c.Nodes[i], err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost == nil {
		c.lost = map[int]bool{}
	}
	c.lost[i] = true
	return nil
}

// render returns the cluster's slurm.conf.
func (c *Cluster) render(opts Options, ctldPort, slurmdPort int) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("ClusterName=scavtest")
	if c.Net != nil {
		// The nodes reach slurmctld at the bridge's address.
		p("SlurmctldHost=localhost(%s)", c.Net.BridgeAddr)
	} else {
		p("SlurmctldHost=localhost")
	}
	p("SlurmUser=root")
	p("SlurmdUser=root")
	p("AuthType=auth/munge")
	p("CredType=cred/munge")
	p("AuthInfo=socket=%s", c.mungeS)
	p("StateSaveLocation=%s/state", c.Dir)
	p("SlurmctldPidFile=%s/slurmctld.pid", c.Dir)
	p("SlurmctldLogFile=%s/slurmctld.log", c.Dir)
	if c.Net != nil { // every node's own files (%n: the node's name)
		p("SlurmdSpoolDir=%s/spool/%%n", c.Dir)
		p("SlurmdPidFile=%s/slurmd-%%n.pid", c.Dir)
		p("SlurmdLogFile=%s/slurmd-%%n.log", c.Dir)
		// A lost node is DOWN within seconds, not SlurmdTimeout's 300 s.
		p("SlurmdTimeout=4")
		p("MessageTimeout=2")
		p("TCPTimeout=2")
	} else {
		p("SlurmdSpoolDir=%s/spool", c.Dir)
		p("SlurmdPidFile=%s/slurmd.pid", c.Dir)
		p("SlurmdLogFile=%s/slurmd.log", c.Dir)
	}
	p("SlurmctldPort=%d", ctldPort)
	p("SlurmdPort=%d", slurmdPort)
	p("ProctrackType=proctrack/linuxproc")
	p("TaskPlugin=task/none")
	p("JobAcctGatherType=jobacct_gather/none")
	p("AccountingStorageType=accounting_storage/none")
	p("JobCompType=jobcomp/none")
	p("MpiDefault=none")
	p("SchedulerType=sched/backfill")
	p("SelectType=select/cons_tres")
	p("SelectTypeParameters=CR_Core")
	p("SlurmdParameters=config_overrides")
	p("ReturnToService=2")
	if opts.Prolog != "" {
		p("Prolog=%s", opts.Prolog)
	}
	if opts.Epilog != "" {
		p("Epilog=%s", opts.Epilog)
	}
	p("PrologFlags=Alloc")
	p("KillWait=%d", max(1, int(opts.KillWait.Round(time.Second)/time.Second)))
	p("MinJobAge=300")
	p("SchedulerParameters=sched_interval=1")
	for i, n := range c.Nodes {
		addr := ""
		if c.Net != nil {
			addr = fmt.Sprintf(" NodeHostname=%s NodeAddr=%s", n, c.Net.Hosts[i].Addr)
		}
		p("NodeName=%s%s CPUs=%d Boards=1 SocketsPerBoard=1 CoresPerSocket=%d ThreadsPerCore=1 RealMemory=8000 State=UNKNOWN",
			n, addr, opts.CPUs, opts.CPUs)
	}
	p("PartitionName=%s Nodes=%s Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO", c.Partition, strings.Join(c.Nodes, ","))
	b.WriteString(opts.ExtraConf)
	return b.String()
}

// daemon starts cmd, one foreground daemon, as a child, its output in <name>.out.
func (c *Cluster) daemon(t testing.TB, name string, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	f, err := os.Create(filepath.Join(c.Dir, name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Env = append(append([]string(nil), c.env...), c.tag)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own group (a terminal's ^C goes to the test only); killed by the
	// kernel if the test process dies without its cleanup (a timeout).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testslurm: start %s: %v", name, err)
	}
	if st, ok := procStat(cmd.Process.Pid); ok {
		c.starts[cmd] = st.start
	}
	return cmd
}

// stat is what procStat reads of /proc/<pid>/stat.
type stat struct {
	state string // R, S, Z, ...
	start uint64 // start time in clock ticks after boot: tells a reused pid apart
}

// procStat reads the state and start time of pid.
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return stat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state); starttime is field 22
	if len(f) < 20 {
		return stat{}, false
	}
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return stat{state: f[0], start: start}, true
}

// poll calls f until it returns nil, failing the test (with the logs)
// after d.
func (c *Cluster) poll(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testslurm: waiting for %s: %v\n%s", what, err, c.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Setenv points this process's Slurm commands at the cluster (SLURM_CONF)
// for the rest of the test, with t.Setenv.
func (c *Cluster) Setenv(t *testing.T) { t.Setenv("SLURM_CONF", c.Conf) }

// Run runs a Slurm command against the cluster and returns its stdout; the
// error includes its stderr.
func (c *Cluster) Run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Hold submits a job that only sleeps, holding an allocation of cpus CPUs
// on the node, waits until it runs and returns its id; the job is
// cancelled when the test ends (and by the cluster's teardown in any case).
func (c *Cluster) Hold(t testing.TB, cpus int) string {
	t.Helper()
	return c.hold(t, "--ntasks="+strconv.Itoa(cpus))
}

// HoldNoKill is Hold for an allocation of perNode CPUs on every node that
// a node failure does not end (sbatch --no-kill): Slurm takes a lost node
// out of it, and the steps go on with the others.
func (c *Cluster) HoldNoKill(t testing.TB, perNode int) string {
	t.Helper()
	return c.hold(t, "--no-kill", "--nodes="+strconv.Itoa(len(c.Nodes)), "--ntasks-per-node="+strconv.Itoa(perNode))
}

// hold is Hold with the sbatch arguments that size the allocation.
func (c *Cluster) hold(t testing.TB, size ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"--parsable", "--job-name=hold"}, size...)
	out, err := c.Run(ctx, "sbatch", append(args, "--output=/dev/null", "--wrap=exec sleep 3600")...)
	if err != nil {
		t.Fatalf("testslurm: hold an allocation: %v", err)
	}
	id := strings.TrimSpace(strings.Split(out, ";")[0])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = c.Run(ctx, "scancel", id)
	})
	c.poll(t, 20*time.Second, "holding job "+id+" to run", func() error {
		st, err := c.JobState(ctx, id)
		if err != nil || st == "RUNNING" {
			return err
		}
		return fmt.Errorf("job %s is %s", id, st)
	})
	return id
}

// JobState returns the JobState scontrol reports for job id.
func (c *Cluster) JobState(ctx context.Context, id string) (string, error) {
	out, err := c.Run(ctx, "scontrol", "show", "job", "-o", id)
	if err != nil {
		return "", err
	}
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "JobState="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no JobState in %q", out)
}

// Logs returns the tails of the daemons' logs, for failure messages.
func (c *Cluster) Logs() string {
	var b strings.Builder
	files := []string{"munged.out", "slurmctld.out", "slurmctld.log", "slurmd.out", "slurmd.log"}
	if c.Net != nil {
		files = files[:3]
		for _, n := range c.Nodes {
			files = append(files, "slurmd-"+n+".out", "slurmd-"+n+".log")
		}
	}
	for _, f := range files {
		data, _ := os.ReadFile(filepath.Join(c.Dir, f))
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", f, data)
	}
	return b.String()
}

// stop cancels every job, shuts the daemons down, reaps them and checks
// that nothing of the cluster is left.
func (c *Cluster) stop() {
	c.stopped.Do(func() {
		t := c.t
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c.Net != nil {
			c.rejoinNodes(ctx)
		}
		if c.script != "" {
			if out, err := c.runScript("stop"); err != nil {
				t.Errorf("testslurm: %s stop: %v\n%s", c.script, err, out)
			}
		}
		if c.ctld != nil && len(c.slurmds) > 0 {
			if out, err := c.Run(ctx, "squeue", "-h", "-o", "%i"); err == nil && strings.TrimSpace(out) != "" {
				_, _ = c.Run(ctx, "scancel", strings.Fields(out)...)
				deadline := time.Now().Add(15 * time.Second)
				for time.Now().Before(deadline) {
					out, err := c.Run(ctx, "squeue", "-h", "-o", "%i %T")
					if err != nil || strings.TrimSpace(out) == "" {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			if c.Net != nil {
				// A step that ran on a node while it was lost ends once
				// slurmctld tells the node, and its slurmstepd then reports
				// to slurmctld: shut down only once it has.
				deadline := time.Now().Add(15 * time.Second)
				for len(c.jobProcs()) > 0 && time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond)
				}
				if left := c.jobProcs(); len(left) > 0 {
					t.Logf("testslurm: job processes still there at the shutdown: %v", left)
				}
			}
			if _, err := c.Run(ctx, "scontrol", "shutdown"); err != nil {
				t.Logf("testslurm: scontrol shutdown: %v", err)
			}
		}
		for _, d := range append(append([]*exec.Cmd(nil), c.slurmds...), c.ctld, c.munged) {
			if d == nil {
				continue
			}
			if d == c.munged {
				_ = d.Process.Signal(syscall.SIGTERM)
			}
			done := make(chan struct{})
			go func() { _ = d.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Errorf("testslurm: %s (pid %d) did not exit; killing it", d.Path, d.Process.Pid)
				_ = d.Process.Kill()
				<-done
			}
			// Reaped: its pid is gone, or is another process's now.
			if st, ok := procStat(d.Process.Pid); ok && st.start == c.starts[d] {
				t.Errorf("testslurm: %s (pid %d) is still there in state %s after it was reaped", d.Path, d.Process.Pid, st.state)
			}
		}
		c.checkNothingLeft(t)
		if t.Failed() {
			t.Logf("testslurm: the daemons' logs:\n%s", c.Logs())
		}
	})
}

// rejoinNodes powers off the nodes still lost (see LoseNode), thaws every
// namespace node and brings its link up, then waits (15 s at most) until
// every other node responds.
func (c *Cluster) rejoinNodes(ctx context.Context) {
	c.mu.Lock()
	lost := c.lost
	c.lost = nil
	c.mu.Unlock()
	var up []string
	for i, n := range c.Nodes {
		if lost[i] {
			c.powerOff(i)
		} else {
			up = append(up, n)
		}
		if err := c.rejoin(i); err != nil {
			c.t.Errorf("testslurm: %v", err)
		}
	}
	if err := c.awaitResponding(ctx, up...); err != nil {
		c.t.Logf("testslurm: %v", err)
	}
}

// powerOff kills every process of the cluster on node i (those whose
// environment names it: slurmd, slurmstepd and the job's processes), as a
// machine powered off; the host's own sshd stays.
func (c *Cluster) powerOff(i int) {
	for _, p := range c.Net.Procs(i) {
		if p.Getenv("SLURM_CONF") == c.Conf || "SCAV_TESTSLURM="+p.Getenv("SCAV_TESTSLURM") == c.tag {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
}

// RestoreNode brings node i back after LoseNode: it thaws it, brings its
// link up and waits (15 s at most) until Slurm sees it respond again;
// Slurm then ends what still ran there of jobs that ended meanwhile.
func (c *Cluster) RestoreNode(ctx context.Context, i int) error {
	if c.Net == nil {
		return fmt.Errorf("restore node %d: a cluster of one node has no namespace nodes", i)
	}
	if err := c.rejoin(i); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.lost, i)
	c.mu.Unlock()
	return c.awaitResponding(ctx, c.Nodes[i])
}

// rejoin thaws node i and brings its link up.
func (c *Cluster) rejoin(i int) error {
	if err := c.Net.Thaw(i); err != nil {
		return fmt.Errorf("rejoin node %s: %w", c.Nodes[i], err)
	}
	if err := c.Net.LinkUp(i); err != nil {
		return fmt.Errorf("rejoin node %s: %w", c.Nodes[i], err)
	}
	return nil
}

// awaitResponding waits (15 s at most) until Slurm reports none of nodes
// down or not responding.
func (c *Cluster) awaitResponding(ctx context.Context, nodes ...string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		states, err := c.NodeStates(ctx)
		var lost []string
		for _, n := range nodes {
			if s := states[n]; err == nil && (strings.HasSuffix(s, "*") || strings.HasPrefix(s, "down")) {
				lost = append(lost, n+" "+s)
			}
		}
		if err == nil && len(lost) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nodes not responding 15 s after they rejoined: %v %v", lost, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkNothingLeft polls until no process of the cluster (one whose
// environment carries its tag or its SLURM_CONF) remains, reaping the
// orphans inherited as subreaper; it kills and reports what is left.
func (c *Cluster) checkNothingLeft(t testing.TB) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		subreaper.ReapOrphans()
		left := c.leftovers()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("testslurm: processes of the cluster left behind: %v", left)
			for _, p := range left {
				if pid, err := strconv.Atoi(strings.Fields(p)[0]); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			time.Sleep(100 * time.Millisecond)
			subreaper.ReapOrphans()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// jobProcs lists, as leftovers does, the processes of the cluster that are
// not its daemons (nor slurmctld's slurmscriptd): slurmstepd and job processes.
func (c *Cluster) jobProcs() []string {
	daemons := map[string]bool{}
	for _, d := range append(append([]*exec.Cmd(nil), c.slurmds...), c.ctld, c.munged) {
		if d != nil && d.Process != nil {
			daemons[strconv.Itoa(d.Process.Pid)] = true
		}
	}
	var procs []string
	for _, p := range c.leftovers() {
		if !daemons[strings.Fields(p)[0]] && !strings.Contains(p, " (slurmscriptd) ") {
			procs = append(procs, p)
		}
	}
	return procs
}

// leftovers lists, as "pid (comm) state", every process whose environment
// names this cluster: a slurmstepd (slurmd's environment carries the
// cluster's tag) or a job process (SLURM_CONF). The daemons themselves are
// not looked up by pid: stop has reaped them (Wait returned), and their
// pids may already belong to another test's processes.
func (c *Cluster) leftovers() []string {
	var left []string
	conf := []byte("SLURM_CONF=" + c.Conf + "\x00")
	tag := []byte(c.tag + "\x00")
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		j := strings.IndexByte(s, '(')
		if i < 0 || j < 0 {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(s[:j]))
		f := strings.Fields(s[i+1:])
		if len(f) < 1 {
			continue
		}
		env, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "environ"))
		env = append([]byte{0}, env...)
		if bytes.Contains(env, append([]byte{0}, conf...)) || bytes.Contains(env, append([]byte{0}, tag...)) {
			left = append(left, fmt.Sprintf("%d %s %s", pid, s[j:i+1], f[0]))
		}
	}
	return left
}

// freePort returns a TCP port that was free on every address a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
