package daemon

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testdir"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// The fault suite (issue 13): each trial injects one fault into a real
// daemon running real python workers, and counts the outcome, the step
// records lost and duplicated, and what was left behind. TestFaults runs
// each trial once; with SCAV_BENCH_FAULTS=FILE (make bench-faults) it runs
// each SCAV_BENCH_N times (default 10) and writes the table to FILE.

// faultWorker reports total steps (10 ms each), writing its pid to
// SIDE/pid-RANK-ATTEMPT; every EVERY steps the ranks meet (as DDP's
// collectives make them: a rank whose peer died waits there until the
// daemon stops it), each marking its arrival with SIDE/at-ATTEMPT-STEP-RANK,
// and rank 0 checkpoints the way the python client does (a temporary file
// renamed, then the manifest); with SLOW=1 it marks each write with
// SIDE/writing-STEP and takes 0.5 s in it. Asked to checkpoint (a stop, a
// move), it does at once and exits 0. The ranks meet through those files;
// with a fifth argument "tcp", through a TCP connection between them at
// MASTER_ADDR:MASTER_PORT instead, as DDP's go over the network: a rank cut
// off from its peer waits at its next meet, and the peer with it. With
// OOM_AT=N in its environment, rank 1 of attempt 1 takes 300 MB at step N;
// with SETSID=1 rank 0 starts a child in a session of its own (which
// outlives it unless its job's cgroup ends it).
const faultWorker = `import json, os, socket, sys, time, scavenger
total, every, slow, side, tcp = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4], sys.argv[5:] == ["tcp"]
rank, attempt, d = int(os.environ.get("RANK", "0")), os.environ["SCAV_ATTEMPT"], scavenger.checkpoint_dir()
open(os.path.join(side, "pid-%d-%s" % (rank, attempt)), "w").write(str(os.getpid()))
oom_at = int(os.environ.get("OOM_AT", "0"))
if os.environ.get("SETSID") == "1" and rank == 0:
    import subprocess
    subprocess.Popen(["sleep", "1000"], start_new_session=True)

def atomic(name, data):
    tmp = os.path.join(d, ".%s.%d.scavtmp" % (name, os.getpid()))
    with open(tmp, "wb") as f:
        f.write(data[:len(data) // 2])
        f.flush()
        if slow and name.startswith("ckpt-"):
            open(os.path.join(side, "writing-" + name[5:-3]), "w").close()
            time.sleep(0.5)
        f.write(data[len(data) // 2:])
    os.replace(tmp, os.path.join(d, name))

peer = None

def connect():
    addr = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    if rank == 0:
        ln = socket.socket()
        ln.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ln.bind(addr)
        ln.listen(1)
        c = ln.accept()[0]
        ln.close()
        return c
    while True:
        try:
            return socket.create_connection(addr)
        except OSError:
            time.sleep(0.05)

def meet(i):
    global peer
    if int(os.environ.get("WORLD_SIZE", "2")) < 2:
        return
    open(os.path.join(side, "at-%s-%d-%d" % (attempt, i, rank)), "w").close()
    if not tcp:
        while not os.path.exists(os.path.join(side, "at-%s-%d-%d" % (attempt, i, 1 - rank))):
            time.sleep(0.005)
        return
    peer = peer or connect()
    peer.sendall(i.to_bytes(4, "big"))
    got = b""
    while len(got) < 4:
        b = peer.recv(4 - len(got))
        if not b:  # the peer is gone: wait to be stopped, as a rank in a collective does
            while True:
                time.sleep(1)
        got += b

def checkpoint(i):
    name = "ckpt-%d.pt" % i
    atomic(name, b"x" * 1000)
    atomic("latest.json", json.dumps({"format": "scavenger.manifest/1", "checkpoint": name, "step": i, "size": 1000}).encode())
    return os.path.join(d, name)

for i in range(scavenger.start_step() + 1, total + 1):
    scavenger.step(samples=1)
    time.sleep(0.01)
    if i == oom_at and rank == 1 and attempt == "1":
        hog = bytearray(300 * 2**20)
    if scavenger.should_checkpoint():  # a stop or a move: checkpoint, say so, exit 0
        scavenger.acknowledge(checkpoint(i) if rank == 0 else None)
        scavenger.close()
        sys.exit(0)
    if i % every == 0 and i < total:
        meet(i)
    if rank == 0 and i % every == 0 and i < total:
        checkpoint(i)
scavenger.close()
`

// trialResult is one trial's outcome.
type trialResult struct {
	ok                       bool // the goal's outcome (the job finished by itself, ...)
	lost, dup, repeated      int  // step records: never stored; stored twice; steps done again after a restart
	procs, zombies, leftover int  // processes of the job alive after it, zombies, temporary or spool files left
	attempts                 int  // the job's attempts
	figure, before           float64
	note                     string
}

// add counts o's records and leftovers into r; its attempts are the most of either.
func (r *trialResult) add(o trialResult) {
	r.lost, r.dup, r.repeated = r.lost+o.lost, r.dup+o.dup, r.repeated+o.repeated
	r.procs, r.zombies, r.leftover = r.procs+o.procs, r.zombies+o.zombies, r.leftover+o.leftover
	r.attempts = max(r.attempts, o.attempts)
}

// faultTrial is one kind of fault: its name, its goal, and one run; most,
// when set, bounds its runs (a long trial); figure names what the runs'
// figure measures (printed min–max, with digits decimals).
type faultTrial struct {
	fault, goal string
	run         func(t *testing.T, python string) trialResult
	most        int
	figure      string
	digits      int
	// beforeAfter: the figure is "before → after", before being the
	// trial's before (the same damage met as the daemon did before it
	// checked its store).
	beforeAfter bool
}

var faultTrials = []faultTrial{
	{fault: "kill -9 a worker (random rank, random time)", goal: "job finishes by itself in N/N; records lost 0", run: killWorkerTrial},
	{fault: "kill -9 rank 0 inside a checkpoint write", goal: "resumes from the last complete checkpoint in N/N", run: killInCheckpointTrial},
	{fault: "state disk full, then freed", goal: "no hang; recovers without restart; records lost 0", run: diskFullTrial},
	{fault: "kill -9 scavd, restart after 3–30 s", goal: "job finishes in N/N; step records lost 0", run: killDaemonTrial},
	{fault: "SIGTERM scavd (service stop) under 4 jobs, start it again", goal: "all checkpoint and resume; records lost 0", run: stopDaemonTrial},
	{fault: "1 GB of output from one job (64 MB when N=1)", goal: "other jobs' history intact; scavd RSS ≤ 150 MB", run: floodTrial, most: 3, figure: "scavd peak RSS, MB"},
	{fault: "4 jobs + 8 readers for 60 s (15 s when N=1)", goal: "0 errors; p99 API latency reported", run: readersTrial, figure: "p99 API latency, ms", digits: 1},
	{fault: "512 B of garbage in a job's record in the job store", goal: "every job listed as it ended; step records lost 0", run: jobStoreGarbageTrial, figure: "step records lost before → after", beforeAfter: true},
	{fault: "job store truncated to 0", goal: "every job listed as it ended; step records lost 0", run: jobStoreEmptiedTrial, figure: "step records lost before → after", beforeAfter: true},
	{fault: "job store's last 100 B cut", goal: "every job listed as it ended; step records lost 0", run: jobStoreCutTrial, figure: "jobs shown wrong before → after", beforeAfter: true},
	{fault: "the output stream's directory (SCAV_OUTPUT) deleted", goal: "said in status; jobs and step records whole", run: outputDeletedTrial},
	{fault: "4 KB of garbage in the step stream's block", goal: "loses only the records the garbage overwrote", run: stepStreamGarbageTrial, figure: "step records lost before → after", beforeAfter: true},
	{fault: "state disk nearly full at start (148 MB free of 2 GB; 200 MB and 20 MB disks)", goal: "starts and runs a job on 148 MB and 200 MB; 20 MB refused naming the space and state_dir", run: smallDiskTrial},
	{fault: "a rank hangs (SIGSTOP), --stall-timeout 3s --on-stall restart", goal: "marked stalled, restarted from the checkpoint, finishes; records lost 0", run: stallTrial, figure: "hang → restarted, s", digits: 1},
	{fault: "checkpoint directory read-only for 25 s", goal: "restarts outlast it and the job finishes; records lost 0", run: readOnlyCheckpointTrial, figure: "attempts"},
	{fault: "a worker killed by the out-of-memory killer (200 MB cgroup)", goal: "restarted from the checkpoint, the kill named; records lost 0", run: oomTrial},
	{fault: "a worker's child in a session of its own (setsid)", goal: "ends with the job: processes left 0, zombies 0", run: setsidTrial},
	{fault: "Slurm node lost mid-job (3 nodes)", goal: "resumes on the rest; records lost 0", run: slurmNodeLostTrial, figure: "loss → relaunched, s", digits: 1},
	// Last: testnet makes the test process a subreaper for the rest of the run.
	{fault: "SSH host link down mid-job", goal: "relaunch on the rest; records lost 0", run: sshLinkTrial, figure: "link down → relaunched, s", digits: 1},
}

func TestFaults(t *testing.T) {
	python := testPython()
	out, n := os.Getenv("SCAV_BENCH_FAULTS"), 1
	if out != "" {
		n = 10
		if v, err := strconv.Atoi(os.Getenv("SCAV_BENCH_N")); err == nil && v > 0 {
			n = v
		}
	}
	var table bytes.Buffer
	fmt.Fprintf(&table, "| fault | goal | N | goal met | records lost | duplicated | steps done again | attempts | processes left | zombies | files left | figure |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, ft := range faultTrials {
		var sum trialResult
		met, runs, minA, maxA, minF, maxF, minB, maxB := 0, 0, 1<<30, 0, 1e18, 0.0, 1e18, 0.0
		runsOf := n
		if ft.most > 0 {
			runsOf = min(n, ft.most)
		}
		for i := 0; i < runsOf; i++ {
			var r trialResult
			ran := false
			t.Run(fmt.Sprintf("%s/%d", ft.fault, i), func(t *testing.T) {
				ran = true
				r = ft.run(t, python)
				if !r.ok || r.lost > 0 || r.dup > 0 || r.procs > 0 || r.zombies > 0 || r.leftover > 0 {
					t.Errorf("%s: %+v", ft.fault, r)
				}
			})
			if !ran {
				break
			}
			runs++
			if r.ok {
				met++
			}
			t.Logf("%s #%d: %+v", ft.fault, i, r)
			minA, maxA = min(minA, r.attempts), max(maxA, r.attempts)
			minF, maxF = min(minF, r.figure), max(maxF, r.figure)
			minB, maxB = min(minB, r.before), max(maxB, r.before)
			sum.add(r)
		}
		if runs == 0 {
			continue // not run (-run)
		}
		attempts := fmt.Sprint(minA)
		if maxA != minA {
			attempts = fmt.Sprintf("%d–%d", minA, maxA)
		}
		figure := ""
		span := func(lo, hi float64) string {
			if lo == hi {
				return fmt.Sprintf("%.*f", ft.digits, lo)
			}
			return fmt.Sprintf("%.*f–%.*f", ft.digits, lo, ft.digits, hi)
		}
		switch {
		case ft.beforeAfter:
			figure = fmt.Sprintf("%s: %s → %s", ft.figure, span(minB, maxB), span(minF, maxF))
		case ft.figure != "":
			figure = fmt.Sprintf("%s: %.*f–%.*f", ft.figure, ft.digits, minF, ft.digits, maxF)
		}
		fmt.Fprintf(&table, "| %s | %s | %d | %d/%d | %d | %d | %d | %s | %d | %d | %d | %s |\n", ft.fault, ft.goal, runs, met, runs,
			sum.lost, sum.dup, sum.repeated, attempts, sum.procs, sum.zombies, sum.leftover, figure)
	}
	t.Logf("\n%s", table.String())
	if out != "" {
		if err := os.WriteFile(out, faultsDoc(n, table.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// faultsDoc is docs/bench-faults.md around the table.
func faultsDoc(n int, table string) []byte {
	return []byte(fmt.Sprintf("# Fault suite (issue 13)\n\nGenerated by `make bench-faults` (N=%d; `make bench-faults N=1` is the quick run) on %d cores, %s. "+
		"Each trial starts a daemon on a fresh state directory, runs real python workers (2 ranks, 10 ms steps, rank 0 "+
		"checkpointing every 40 steps), injects the fault and counts: step records never stored, stored twice (same "+
		"attempt, rank and step), steps done again after a restart from the checkpoint (expected: the steps since it), the job's attempts, "+
		"the job's processes still alive after its end, zombies, and temporary or spool files left in its checkpoint "+
		"directory. In the state-disk trial the checkpoint directory is on the full disk too: a checkpoint that does not fit "+
		"fails rank 0, and the job restarts from the previous one (hence its second attempt). The kill -9 of scavd runs "+
		"bin/scavd as its own process and waits 3–30 s (3 s when N=1) before starting it again; so do the service stop "+
		"(SIGTERM under 4 jobs within a second of their first step record, each asked to checkpoint, which it does at once) and the flood (one job writes 1 GB to its "+
		"stdout after another job wrote 1000 lines; the figure is scavd's VmHWM). "+
		"The readers trial runs 4 jobs sized to 60 s of steps (15 s when N=1) under 8 API readers, each with its own client, "+
		"reading in a loop until the jobs end (the job list; a job's status, output, output followed to its first frame, step "+
		"records and report); the figure is the p99 latency of all their calls (the log has each kind's p50, p99 and max). "+
		"The SSH trial runs a job at 2 workers through the ssh launcher (scavd's keepalive defaults) on 3 namespace hosts, its ranks "+
		"meeting over TCP as DDP's collectives do, and cuts the link of one rank's host after the first checkpoint; the figure is the "+
		"time from the cut to the relaunched attempt's start. The records the cut-off rank reported after the cut may never reach the "+
		"daemon; their steps come after the checkpoint and are done again (the log counts them); records lost are steps without "+
		"any record. Its processes left are counted once the host answers again and a job on all 3 hosts ran. "+
		"The Slurm trial runs a job at 2 workers on 2 of the 3 namespace nodes of a private Slurm cluster (each node its own slurmd, "+
		"every attempt a batch job the launcher submits), and loses rank 1's node after the first checkpoint (its link down and "+
		"its processes frozen, as a dead machine); the figure is the time from the loss to the relaunched workers' start on the two "+
		"other nodes; its processes left are counted once the node is back and Slurm ended what still ran there. "+
		"The store trials (issue 21) run 3 jobs of the same workers (200 steps each) to their ends, stop the daemon, damage its store on disk, and start a daemon on it; "+
		"before is what a daemon that did not check its store reaches of a copy of the same damaged store (the jobs it lists as they ended, the step records it serves), after what this one reaches. "+
		"The small-disk trial starts scavd with its state directory on a 2 GB disk with 148 MB free and on a 200 MB disk (each runs a job to its end), and on a 20 MB disk (refused). "+
		"The worker trials (a hung rank, a read-only checkpoint directory, an out-of-memory kill, a child in its own session) run one job of the workers through the fault. "+
		"The test is daemon/faults_test.go (the API, Slurm and SSH trials in faults_api_test.go, faults_slurm_test.go and faults_ssh_test.go, the store trials in faults_store_test.go, the worker trials in faults_proc_test.go; TestFaults runs each trial once).\n\n%s\n%s",
		n, numCPU(), time.Now().UTC().Format("2006-01-02"), table, faultsNotes))
}

// faultsNotes is what the table does not say: how to read its rows. Its
// figures are in the table and in each run's line of the log (make
// bench-faults prints them), not here.
const faultsNotes = `How to read the rows:

- **kill -9 scavd**: the worker's client keeps every step record until scavd confirms it stored it, and sends the unconfirmed ones again to the next scavd; the restarted scavd asks the leftover workers to checkpoint at one step before it stops them, and each client delivers its last records first. Down for 3 s (the CI run), the job goes on from where its workers were. Steps done again come from longer outages: the workers finished while no scavd ran, no exit status survives for the next one, so it resumes from the last checkpoint and does the steps after it again.
- **duplicated** counts records stored twice. A scavd that stored a batch and died before its confirmation reached the worker gets the batch again from the worker; the next scavd reads the attempt's last stored records at the worker's hello and drops those copies (daemon/ingest/dedupe.go).
- **state disk full**: rank 0's checkpoint does not fit on the full disk and it exits 1; a restart that comes while the disk is still full ends the same way, and one after the back-off finds room (each run's log names every attempt's end).
- **SIGTERM scavd under 4 jobs**: the jobs are stopped within a second of their first step record; a job that resumes from an older checkpoint than the one asked for fails the trial (steps done again would show it). The daemon leads such an early request by time, from the first record's step time.
- **1 GB of output** runs at most 3 times: each run writes 1 GB through scavd. The figure is scavd's VmHWM over the whole run.
- **4 jobs + 8 readers**: each run's log line has its calls and each kind's p50, p99 and max. The calls that read a job's whole step history (steps, report) set the p99.
- **Slurm node lost** and **SSH host link down**: the figure is the time from the loss to the relaunched workers' start: for Slurm mostly Slurm noticing the node (the test cluster's SlurmdTimeout and its ping cycle), for SSH scavd's keepalive. The steps done again are those since the last checkpoint, on both ranks.
- **The store's damage** (issue 21): scavd reads every record of its store before the NATS server opens it, verifying each record's hash; a damaged block is rewritten without its damaged stretches (the server alone cuts the block at the first bad record, losing everything after it), the damaged files are kept in <state>/damaged-<time>, and scavctl status, the log and the scavenger_store_* metrics say what was lost. Job records are journaled in a stream of their own and restored from it when the job store lost them or holds an older one (a cut end brings back a "running" record of a job that had succeeded). Before, a damaged job store hid the jobs it could not read, and with them their step records (the API serves a job's steps only with its record), or listed a finished job as failed.
- **What JetStream offers itself**: its file store checks a record's hash only when it rebuilds a block (after an unclean stop, or when a read meets the record), cuts the block at the first bad record, and trusts its index otherwise; its block size is not set through the stream API (the server sizes blocks from a stream's byte limit: 4–8 MB here). So scavd checks every record itself before the server opens the store, and keeps the records after the damage; the figures above are that check's gain over the server alone.
- **the output stream's directory deleted**: its output and events are gone (their only copy); scavd makes the stream afresh and says in status, the log and scavd --check-store which stream was missing (before, nothing said so).
- **4 KB of garbage in the step stream**: records lost counts the records lost beyond those of the messages the garbage touched; the figure counts all. Those are gone: no design here can survive the loss of the only copy of bytes (the workers' clients drop a record once scavd confirms it stored it). A NATS cluster with replicas (replicas: 3) keeps another copy on other nodes; one node's store cannot.
- **state disk nearly full at start**: the streams' byte limits follow the space at start (half of the free space plus what the store holds, each at least 1/32 of its default: 50 MiB in all); a disk too small for that is refused before anything starts, naming the space needed and state_dir (and store_max_bytes).
- **a rank hangs**: the watchdog (default --stall-timeout: 10 times the slowest step seen, at least 5 minutes; the trial sets 3 s) marks the job stalled in status, top and the metrics; with --on-stall restart it ends the attempt (the stopped rank too) and restarts from the checkpoint. The figure is the time from the hang to the new attempt's start: the timeout, the watchdog's 2 s look, the stop's grace (5 s: the ranks are stuck, not checkpointing) and the start.
- **checkpoint directory read-only for 25 s**: rank 0's checkpoint fails and the job crashes at each attempt until it is writable again; past --max-restarts the job goes on restarting while its back-off is under --restart-window (default 2 minutes: before, 3 restarts in 3 s ended it). Status reports the read-only directory meanwhile. The figure is the job's attempts.
- **out-of-memory kill**: the first attempt's end names the kernel's out-of-memory killer (from the kernel log; the cgroup's own count says the same), not just SIGKILL.
- **a worker's child in its own session**: every attempt has a cgroup (cgroup v2) that holds every process its workers start, whatever their session or group; it is killed with the attempt, and its orphans reaped.
- **Not in this table**, tested instead: the flags and requests no job can have (TestBadFlagsAreRefused, TestValidateRefusesWhatNoJobCanHave); a command that cannot run or fails before its first step twice alike is not restarted (TestCommandsThatCannotRunAreNotRestarted); a NaN loss is an event and --on-nan stop stops the job (TestNaNLossIsAnEvent). The rows of issue 21's table about the spool, slow request bodies, a frozen scavd, values out of range and fabricated progress are the trials and tests of the security and telemetry work.
`

// numCPU is the number of cores, for the table's heading.
func numCPU() int { return runtime.NumCPU() }

// faultDaemon starts a daemon of cfg, whose StateDir is a fresh directory
// (node n1, NATS on a free port, and unless cfg sets one a retention that
// fits a small state disk), and returns it with a client; both are closed
// at the end of the test.
func faultDaemon(t *testing.T, cfg Config) (*Daemon, *api.Client) {
	t.Helper()
	ctx := context.Background()
	cfg.Listen, cfg.Node = "127.0.0.1:0", "n1"
	if cfg.Retention == (history.Retention{}) {
		cfg.Retention = history.Retention{StepMaxBytes: 8 << 20, LogMaxBytes: 8 << 20, NodeMaxBytes: 1 << 20}
	}
	d, err := Start(ctx, cfg, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	if err != nil {
		t.Fatal(err)
	}
	c, err := api.Dial(ctx, d.APISocket(), 5*time.Second)
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		if err := d.Close(); err != nil {
			t.Errorf("close the daemon: %v", err)
		}
	})
	return d, c
}

// submitWorkers runs faultWorker on 2 ranks; extra are its further
// arguments ("tcp").
func submitWorkers(t *testing.T, c *api.Client, python, side string, total, every int, slow bool, extra ...string) api.Job {
	t.Helper()
	s := "0"
	if slow {
		s = "1"
	}
	j, err := c.Run(context.Background(), api.RunRequest{
		Command: append([]string{python, "-c", faultWorker, strconv.Itoa(total), strconv.Itoa(every), s, side}, extra...),
		Dir:     side, Config: plugins.Config{Workers: 2}, Grace: api.Duration(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// workerPid waits for the pid of rank's worker in attempt.
func workerPid(t *testing.T, side string, rank, attempt int) int {
	t.Helper()
	var pid int
	waitFor(t, time.Minute, fmt.Sprintf("rank %d of attempt %d to start", rank, attempt), func() bool {
		b, err := os.ReadFile(filepath.Join(side, fmt.Sprintf("pid-%d-%d", rank, attempt)))
		pid, _ = strconv.Atoi(string(b))
		return err == nil && pid > 0
	})
	return pid
}

// countSteps counts job id's step records against the total steps of each
// of ranks ranks, waiting (a minute at most) for records still on their way.
func countSteps(t *testing.T, c *api.Client, id string, ranks, total int) (lost, dup, repeated int) {
	t.Helper()
	type key struct{ attempt, rank int }
	var byStep map[int]map[int64]int
	var byAttempt map[key]map[int64]int
	read := func() bool {
		byStep, byAttempt = map[int]map[int64]int{}, map[key]map[int64]int{}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Steps(ctx, id, false, func(r telemetry.StepRecord) error {
			if byStep[r.Rank] == nil {
				byStep[r.Rank] = map[int64]int{}
			}
			byStep[r.Rank][r.Step]++
			k := key{r.Attempt, r.Rank}
			if byAttempt[k] == nil {
				byAttempt[k] = map[int64]int{}
			}
			byAttempt[k][r.Step]++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		lost = 0
		for rank := 0; rank < ranks; rank++ {
			for s := int64(1); s <= int64(total); s++ {
				if byStep[rank][s] == 0 {
					lost++
				}
			}
		}
		return lost == 0
	}
	for deadline := time.Now().Add(time.Minute); !read() && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
	}
	if lost > 0 {
		t.Logf("missing steps: %s", missingSteps(byStep, ranks, total))
	}
	var dups []string
	for k, steps := range byAttempt {
		for s, n := range steps {
			if n > 1 {
				dup += n - 1
				dups = append(dups, fmt.Sprintf("attempt %d rank %d step %d ×%d", k.attempt, k.rank, s, n))
			}
		}
	}
	if dup > 0 {
		slices.Sort(dups)
		t.Logf("duplicated: %s", strings.Join(dups, ", "))
	}
	for _, steps := range byStep {
		for _, n := range steps {
			repeated += n - 1
		}
	}
	return lost, dup, repeated - dup
}

// leftovers counts what job id left: its processes still alive, zombies
// among this process's children, and temporary or spool files in its
// checkpoint directory.
func leftovers(j api.Job) (procs, zombies, files int) {
	ents, _ := os.ReadDir("/proc")
	me := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err == nil && bytes.Contains(env, []byte("SCAV_JOB_ID="+j.ID+"\x00")) {
			procs++
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			// pid (comm) S ppid ...: the comm may hold spaces, the rest follows its last ')'.
			if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(me) {
				zombies++
			}
		}
	}
	tmps, _ := filepath.Glob(filepath.Join(j.CheckpointDir, ".*.scavtmp"))
	spooled, _ := filepath.Glob(filepath.Join(j.CheckpointDir, ".scavenger-spool", "*"))
	return procs, zombies, len(tmps) + len(spooled)
}

// settle fills in a finished job's records and leftovers.
func settle(t *testing.T, c *api.Client, j api.Job, total int, r *trialResult) {
	t.Helper()
	r.lost, r.dup, r.repeated = countSteps(t, c, j.ID, 2, total)
	r.procs, r.zombies, r.leftover = leftovers(j)
	r.attempts = len(j.Attempts)
}

// killWorkerTrial kills a random rank with SIGKILL at a random time: the
// job must restart from its checkpoint and finish by itself.
func killWorkerTrial(t *testing.T, python string) trialResult {
	const total, every = 400, 40
	_, c := faultDaemon(t, Config{StateDir: t.TempDir()})
	side := t.TempDir()
	j := submitWorkers(t, c, python, side, total, every, false)
	rank := rand.IntN(2)
	pid := workerPid(t, side, rank, 1)
	workerPid(t, side, 1-rank, 1)
	time.Sleep(time.Duration(300+rand.IntN(1700)) * time.Millisecond)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill rank %d: %v", rank, err)
	}
	final := follow(t, c, j.ID, 3*time.Minute)
	j, err := c.Job(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	r := trialResult{ok: final.ExitCode != nil && *final.ExitCode == 0 && j.State == api.StateSucceeded && len(j.Attempts) >= 2,
		note: fmt.Sprintf("rank %d killed; %d attempts", rank, len(j.Attempts))}
	settle(t, c, j, total, &r)
	return r
}

// killInCheckpointTrial kills rank 0 while it writes its second checkpoint:
// the next attempt must start from the first, the last complete one.
func killInCheckpointTrial(t *testing.T, python string) trialResult {
	const total, every = 200, 40
	_, c := faultDaemon(t, Config{StateDir: t.TempDir()})
	side := t.TempDir()
	j := submitWorkers(t, c, python, side, total, every, true)
	pid := workerPid(t, side, 0, 1)
	waitFor(t, 2*time.Minute, "rank 0 inside its second checkpoint write", func() bool {
		_, err := os.Stat(filepath.Join(side, fmt.Sprintf("writing-%d", 2*every)))
		return err == nil
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill rank 0: %v", err)
	}
	final := follow(t, c, j.ID, 3*time.Minute)
	j, err := c.Job(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(j.CheckpointDir, fmt.Sprintf("ckpt-%d.pt", every))
	r := trialResult{ok: final.ExitCode != nil && *final.ExitCode == 0 && len(j.Attempts) >= 2 && j.Attempts[1].Restore == want}
	if !r.ok {
		r.note = fmt.Sprintf("state %s, attempts %+v; want attempt 2 from %s", j.State, j.Attempts, want)
	}
	settle(t, c, j, total, &r)
	return r
}

// diskFullTrial fills the state disk under 2 stepping ranks and a job that
// floods its output, then frees it: every job must end, the daemon must
// recover by itself, and no step record may be lost.
func diskFullTrial(t *testing.T, python string) trialResult {
	const total, every = 300, 40
	disk := smallDisk(t, 64<<20)
	d, c := faultDaemon(t, Config{StateDir: filepath.Join(disk, "state"), OutputReadPerUser: -1})
	side := t.TempDir()
	j := submitWorkers(t, c, python, side, total, every, false)
	workerPid(t, side, 0, 1)
	f := fill(t, disk, 3<<20)
	flood, err := c.Run(context.Background(), api.RunRequest{Command: []string{"/bin/sh", "-c", "for i in $(seq 100000); do echo line $i of a flood of output that fills what is left; done"},
		Dir: side, Config: plugins.Config{Workers: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// Full means a write was refused (the store holds), not only that the
	// watch saw little space left: freeing it before would test no recovery.
	waitFor(t, time.Minute, "the daemon to report the full state disk, and the store to refuse a write", func() bool {
		return d.info().StateDisk != "" && d.disk.holding()
	})
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the daemon to recover", func() bool { return d.info().StateDisk == "" })
	ok := true
	for _, id := range []string{j.ID, flood.ID} {
		if final := follow(t, c, id, 3*time.Minute); final.ExitCode == nil || *final.ExitCode != 0 {
			ok = false
		}
	}
	_, _, restarts := d.disk.gauges()
	if j, err = c.Job(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	var ends []string
	for _, a := range j.Attempts {
		ends = append(ends, a.EndReason)
	}
	r := trialResult{ok: ok && restarts >= 1, note: fmt.Sprintf("the store restarted %v times; the attempts ended: %s", restarts, strings.Join(ends, "; "))}
	settle(t, c, j, total, &r)
	return r
}

// scavdBin is the scavd binary the scavd trials run: $SCAV_TEST_BIN/scavd,
// else one built for the test.
func scavdBin(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("SCAV_TEST_BIN"); dir != "" {
		return filepath.Join(dir, "scavd")
	}
	bin := filepath.Join(t.TempDir(), "scavd")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/scavd").CombinedOutput(); err != nil {
		t.Fatalf("build scavd: %v\n%s", err, out)
	}
	return bin
}

// scavdProc is a scavd run as its own process.
type scavdProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// scavdStateDir is a state directory for a scavd of the test's own, removed
// when the test ends (outside t.TempDir: its sockets' paths must be short).
func scavdStateDir(t *testing.T) string { return testdir.Short(t, "scavf-") }

// startScavd starts bin on state and waits for its API.
func startScavd(t *testing.T, bin, state string) (*scavdProc, *api.Client) {
	t.Helper()
	cmd := exec.Command(bin, "--config", "", "--state-dir", state, "--listen", "127.0.0.1:0", "--metrics-listen", "",
		"--node", "n1", "--node-sample-every", "0", "--log-level", "warn", "--gpu-source", "none", "--output-read-kib-per-user", "0", "--output-mib-per-user", "0")
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &errOut, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &scavdProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }() // joined by stop
	t.Cleanup(func() { p.stop(syscall.SIGTERM) })
	var c *api.Client
	// Ready once its discovery file names it: it has settled the jobs of
	// the daemon before (its API answers a little earlier).
	waitFor(t, time.Minute, "scavd ready", func() bool {
		select {
		case <-p.done:
			t.Fatalf("scavd exited: %s", errOut.String())
		default:
		}
		if info, err := api.ReadDiscovery(state); err != nil || info.PID != cmd.Process.Pid {
			return false
		}
		var err error
		c, err = api.Dial(context.Background(), filepath.Join(state, api.SocketName), time.Second)
		return err == nil
	})
	t.Cleanup(func() { c.Close() })
	return p, c
}

// stop sends sig to scavd and waits for it to end (kills it after a minute).
func (p *scavdProc) stop(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// killDaemonTrial kills scavd with SIGKILL while its job runs, waits 3–30 s
// (3 s for a single run), starts it again on the same state directory: the
// job must finish with every step record stored.
func killDaemonTrial(t *testing.T, python string) trialResult {
	const total, every = 600, 40
	bin, state := scavdBin(t), scavdStateDir(t)
	p, c := startScavd(t, bin, state)
	side := t.TempDir()
	j := submitWorkers(t, c, python, side, total, every, false)
	workerPid(t, side, 0, 1)
	workerPid(t, side, 1, 1)
	time.Sleep(time.Duration(300+rand.IntN(1200)) * time.Millisecond)
	p.stop(syscall.SIGKILL)
	down := 3 * time.Second
	if os.Getenv("SCAV_BENCH_FAULTS") != "" {
		down += time.Duration(rand.IntN(27000)) * time.Millisecond
	}
	time.Sleep(down)
	_, c = startScavd(t, bin, state)
	// A follower (scavctl run) sees the end of the resumed job, not that of
	// the attempt lost with the daemon.
	final := follow(t, c, j.ID, 3*time.Minute)
	j, err := c.Job(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	r := trialResult{ok: j.State == api.StateSucceeded && final.ExitCode != nil && *final.ExitCode == 0 && final.Attempt == j.Attempt,
		note: fmt.Sprintf("down %s; %s: %s", down.Round(time.Second), j.State, j.Message)}
	settle(t, c, j, total, &r)
	return r
}

// missingSteps names, by rank, the ranges of steps without a record.
func missingSteps(byStep map[int]map[int64]int, ranks, total int) string {
	var out []string
	for rank := 0; rank < ranks; rank++ {
		for s := int64(1); s <= int64(total); s++ {
			if byStep[rank][s] > 0 {
				continue
			}
			e := s
			for e < int64(total) && byStep[rank][e+1] == 0 {
				e++
			}
			out = append(out, fmt.Sprintf("rank %d: %d-%d", rank, s, e))
			s = e
		}
	}
	return strings.Join(out, ", ")
}

// stopDaemonTrial stops scavd with SIGTERM (a service stop) under 4 jobs and
// starts it again: each must checkpoint, resume from that checkpoint, and
// finish with every step record stored.
func stopDaemonTrial(t *testing.T, python string) trialResult {
	const total, every = 400, 40
	bin, state := scavdBin(t), scavdStateDir(t)
	p, c := startScavd(t, bin, state)
	var js []api.Job
	for k := 0; k < 4; k++ {
		js = append(js, submitWorkers(t, c, python, t.TempDir(), total, every, false))
	}
	// Stopped early (within a second of its first step record, most often
	// before its first periodic checkpoint), each job must still
	// checkpoint at one step on both ranks: the daemon leads its request by
	// time from the first record's step time, not by two steps the ranks
	// may have passed (and then wait for each other at different steps).
	for _, j := range js {
		waitFor(t, 3*time.Minute, "job "+j.ID+"'s first step record", func() bool {
			_, ok, err := c.LastStep(context.Background(), j.ID)
			return err == nil && ok
		})
	}
	time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond)
	p.stop(syscall.SIGTERM)
	_, c = startScavd(t, bin, state)
	r := trialResult{ok: true}
	for _, j := range js {
		waitFor(t, 3*time.Minute, "job "+j.ID+" to end", func() bool {
			var err error
			j, err = c.Job(context.Background(), j.ID)
			return err == nil && j.State.Done()
		})
		resumed := len(j.Attempts) >= 2 && j.Attempts[0].EndReason == string(api.StateStopped) && j.Attempts[1].Restore != ""
		if j.State != api.StateSucceeded || !resumed {
			r.ok, r.note = false, fmt.Sprintf("job %s %s after %d attempts: %s", j.ID, j.State, len(j.Attempts), j.Message)
		}
		var one trialResult
		settle(t, c, j, total, &one)
		if one.repeated > 0 { // resumed from an older checkpoint: it did not checkpoint when stopped
			r.ok, r.note = false, fmt.Sprintf("job %s did not checkpoint when stopped: %d steps done again", j.ID, one.repeated)
		}
		r.add(one)
	}
	return r
}

// floodWorker writes argv[1] MB of 100-byte lines to its stdout.
const floodWorker = `import sys
line = b"x" * 99 + b"\n"
for _ in range(int(sys.argv[1]) * 10):
    sys.stdout.buffer.write(line * 1000)
`

// floodTrial runs a job of 1000 numbered lines, then one that writes 1 GB
// (64 MB for a single run) to its stdout: the first job's history must stay
// whole, and scavd's memory bounded (the figure: its peak RSS in MB).
func floodTrial(t *testing.T, python string) trialResult {
	mb := 64
	if os.Getenv("SCAV_BENCH_FAULTS") != "" {
		mb = 1000
	}
	state := scavdStateDir(t)
	p, c := startScavd(t, scavdBin(t), state)
	ctx := context.Background()
	run := func(cmd ...string) api.Job {
		j, err := c.Run(ctx, api.RunRequest{Command: cmd, Dir: t.TempDir(), Config: plugins.Config{Workers: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if final := follow(t, c, j.ID, 10*time.Minute); final.ExitCode == nil || *final.ExitCode != 0 {
			t.Fatalf("job %v ended %+v", cmd[:1], final)
		}
		return j
	}
	small := run("/bin/sh", "-c", "for i in $(seq 1000); do echo line $i; done")
	flood := run(python, "-c", floodWorker, strconv.Itoa(mb))
	lines := 0
	ctx2, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Output(ctx2, small.ID, false, func(l *telemetry.LogLine, _ *telemetry.Event) error {
		if l != nil {
			lines++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r := trialResult{figure: float64(peakRSS(p.cmd.Process.Pid)) / (1 << 20), attempts: 1}
	r.ok = lines == 1000 && r.figure <= 150
	r.note = fmt.Sprintf("history of the earlier job: %d lines of 1000; scavd peak RSS %.0f MB", lines, r.figure)
	r.procs, r.zombies, r.leftover = leftovers(flood)
	return r
}

// peakRSS is pid's peak resident set size in bytes (VmHWM), or 0.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
