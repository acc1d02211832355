package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/internal/testslurm"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/plugins/conformance"
	"github.com/scavenger-ml/scavenger/plugins/goplugin"
)

// lines collects output lines per rank as "stream: text".
type lines struct {
	mu sync.Mutex
	by map[int][]string
}

func (l *lines) add(rank int, s plugins.Stream, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[int][]string{}
	}
	l.by[rank] = append(l.by[rank], string(s)+": "+text)
}

func (l *lines) of(rank int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.by[rank]...)
}

// await polls until rank wrote a line containing text.
func (l *lines) await(t *testing.T, ctx context.Context, rank int, text string) {
	t.Helper()
	for {
		for _, s := range l.of(rank) {
			if strings.Contains(s, text) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("rank %d never wrote %q; got %q", rank, text, l.of(rank))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newLauncher returns a launcher for cluster c; jobID "" submits batch jobs.
func newLauncher(t *testing.T, c *testslurm.Cluster, jobID string, mod func(*Options)) *Launcher {
	t.Helper()
	opts := Options{
		Logger:       zaptest.NewLogger(t, zaptest.Level(zap.DebugLevel)),
		JobID:        jobID,
		Env:          []string{"SLURM_CONF=" + c.Conf, "OMP_NUM_THREADS=1"},
		Grace:        500 * time.Millisecond,
		PollInterval: 100 * time.Millisecond,
		SrunArgs:     []string{"--exact"}, // several steps at once in one allocation
		WorkDir:      t.TempDir(),
	}
	if mod != nil {
		mod(&opts)
	}
	l, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// overGRPC serves l over go-plugin's real gRPC transport and returns the client side.
func overGRPC(t *testing.T, l plugins.Launcher) plugins.Launcher {
	client, _ := plugin.TestPluginGRPCConn(t, false, goplugin.PluginSet(l, zap.NewNop()))
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(goplugin.PluginName)
	if err != nil {
		t.Fatalf("Dispense: %v", err)
	}
	return raw.(plugins.Launcher)
}

// TestCluster runs every test that needs the real Slurm against one cluster.
func TestCluster(t *testing.T) {
	c := testslurm.Start(t, testslurm.Options{CPUs: 64})
	alloc := c.Hold(t, 32)

	t.Run("ConformanceInAllocation", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) plugins.Launcher { return newLauncher(t, c, alloc, nil) })
	})
	t.Run("ConformanceInAllocationOverGRPC", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) plugins.Launcher { return overGRPC(t, newLauncher(t, c, alloc, nil)) })
	})
	t.Run("ConformanceSubmitted", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) plugins.Launcher { return newLauncher(t, c, "", nil) })
	})
	t.Run("ConformanceSubmittedOverGRPC", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) plugins.Launcher { return overGRPC(t, newLauncher(t, c, "", nil)) })
	})
	t.Run("RecoverSubmitted", func(t *testing.T) {
		t.Parallel()
		conformance.RunRecover(t, func(t *testing.T) plugins.Launcher { return newLauncher(t, c, "", nil) })
	})
	t.Run("RecoverSubmittedOverGRPC", func(t *testing.T) {
		t.Parallel()
		conformance.RunRecover(t, func(t *testing.T) plugins.Launcher { return overGRPC(t, newLauncher(t, c, "", nil)) })
	})
	t.Run("Scenarios", func(t *testing.T) {
		t.Run("StepInTheJobsAllocation", func(t *testing.T) { t.Parallel(); testStepInTheJobsAllocation(t, c, alloc) })
		t.Run("Capabilities", func(t *testing.T) { t.Parallel(); testCapabilities(t, c, alloc) })
		t.Run("TorchDDPInAllocation", func(t *testing.T) { t.Parallel(); testTorchDDP(t, newLauncher(t, c, alloc, nil), true) })
		t.Run("TorchDDPSubmitted", func(t *testing.T) { t.Parallel(); testTorchDDP(t, newLauncher(t, c, "", nil), false) })
		t.Run("Requeue", func(t *testing.T) { t.Parallel(); testRequeue(t, c) })
		t.Run("RequeueRace", func(t *testing.T) { t.Parallel(); testRequeueRace(t, c) })
		t.Run("PreemptInAllocation", func(t *testing.T) { t.Parallel(); testPreempt(t, c, true) })
		t.Run("PreemptSubmitted", func(t *testing.T) { t.Parallel(); testPreempt(t, c, false) })
		t.Run("WarnedBeforeTimeLimit", func(t *testing.T) { t.Parallel(); testTimeLimitWarning(t, c) })
		t.Run("StartCancelledWhileStepWaits", func(t *testing.T) { t.Parallel(); testStartWhileBusy(t, c) })
		t.Run("SlurmErrors", func(t *testing.T) { t.Parallel(); testSlurmErrors(t, c, alloc) })
		t.Run("ModeSelfInAllocation", func(t *testing.T) { t.Parallel(); testModeSelf(t, newLauncher(t, c, alloc, nil)) })
		t.Run("ModeSelfSubmitted", func(t *testing.T) { t.Parallel(); testModeSelf(t, newLauncher(t, c, "", nil)) })
	})
	// Alone: its job waits for CPUs the allocation holds, and would hold
	// back the others' jobs.
	t.Run("StopPending", func(t *testing.T) { testStopPending(t, c) })
}

func testCapabilities(t *testing.T, c *testslurm.Cluster, alloc string) {
	ctx := testCtx(t, 30*time.Second)
	got, err := newLauncher(t, c, alloc, nil).Capabilities(ctx)
	if want := (plugins.Capabilities{MaxWorkers: 32, Hosts: []string{c.Node}}); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("in allocation: %+v, %v; want %+v", got, err, want)
	}
	got, err = newLauncher(t, c, "", nil).Capabilities(ctx)
	if want := (plugins.Capabilities{MaxWorkers: c.CPUs, Hosts: []string{c.Node}}); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("submitting: %+v, %v; want %+v", got, err, want)
	}
	if _, err := newLauncher(t, c, "999999", nil).Capabilities(ctx); !errors.Is(err, ErrNoJob) {
		t.Errorf("unknown allocation: %v, want ErrNoJob", err)
	}
}

// needTorch skips unless /usr/bin/python3 imports torch.
func needTorch(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		t.Skipf("SKIP: /usr/bin/python3 cannot import torch (apt-get install -y python3-torch): %v", err)
	}
}

// testTorchDDP runs testdata/ddp.py as a 2-worker gloo job, then relaunches it at 1 worker.
func testTorchDDP(t *testing.T, l *Launcher, inAlloc bool) {
	needTorch(t)
	script, err := filepath.Abs("testdata/ddp.py")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 90*time.Second)
	idPattern := regexp.MustCompile(`^\d+$`)
	if inAlloc {
		idPattern = regexp.MustCompile(`^\d+\.\d+$`)
	}
	for attempt, workers := range []int{2, 1} {
		var out lines
		spec := conformance.ShellSpec(t, workers, "", out.add)
		spec.Command = []string{"/usr/bin/python3", script}
		spec.Attempt = attempt + 1
		spec.Config.GlobalBatch = 8
		h, err := l.Start(ctx, spec)
		if err != nil {
			t.Fatalf("Start %d workers: %v", workers, err)
		}
		if !idPattern.MatchString(h.ID()) {
			t.Errorf("handle id %q does not match %v", h.ID(), idPattern)
		}
		res, err := h.Wait(ctx)
		if err != nil || res.ExitCode != 0 || res.FailedRank != -1 || len(res.Ranks) != workers {
			t.Fatalf("%d workers: %+v, %v\noutput %q %q", workers, res, err, out.of(0), out.of(1))
		}
		sum := workers * (workers + 1) / 2
		for r := range workers {
			want := fmt.Sprintf("stdout: rank %d world %d local %d/%d sum %d preempt USR1 master 127.0.0.1", r, workers, r, workers, sum)
			if got := out.of(r); !slicesContains(got, want) {
				t.Errorf("rank %d output %q, want a line %q", r, got, want)
			}
			if res.Ranks[r].PID <= 0 || res.Ranks[r].ExitCode != 0 {
				t.Errorf("rank %d result %+v", r, res.Ranks[r])
			}
		}
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// testRequeue requeues a submitted job while it runs: the launcher
// releases it from Slurm's 120 s BeginTime hold, it runs again within
// seconds with SLURM_RESTART_COUNT=1, and the output file keeps the first
// run's lines.
func testRequeue(t *testing.T, c *testslurm.Cluster) {
	ctx := testCtx(t, 60*time.Second)
	l := newLauncher(t, c, "", nil)
	var out lines
	h, err := l.Start(ctx, conformance.ShellSpec(t, 2, `echo "run ${SLURM_RESTART_COUNT:-0} $SCAV_PREEMPT_SIGNAL"
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then exec sleep 60; fi
echo done`, out.add))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = h.Stop(context.Background(), 0) })
	out.await(t, ctx, 0, "run 0 USR1")
	out.await(t, ctx, 1, "run 0 USR1")
	begin := time.Now()
	if _, err := c.Run(ctx, "scontrol", "requeue", h.ID()); err != nil {
		t.Fatal(err)
	}
	out.await(t, ctx, 0, "run 1 USR1")
	out.await(t, ctx, 1, "run 1 USR1")
	took := time.Since(begin)
	if took > 20*time.Second {
		t.Errorf("the requeued job ran again after %v: it was not released from its BeginTime hold", took)
	}
	t.Logf("the requeued job ran again %.1fs after the requeue", took.Seconds())
	res, err := h.Wait(ctx)
	if err != nil || res.ExitCode != 0 || res.FailedRank != -1 || len(res.Ranks) != 2 {
		t.Fatalf("Result %+v, %v; want the second run's success", res, err)
	}
	for r := range 2 {
		if got, want := out.of(r), []string{"stdout: run 0 USR1", "stdout: run 1 USR1", "stdout: done"}; !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d output %q, want %q", r, got, want)
		}
	}
	files, _ := filepath.Glob(filepath.Join(l.opts.WorkDir, "*", "out"))
	if len(files) != 1 {
		t.Fatalf("output files %q", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SCAVRUN 0\n", "0: run 0 USR1\n", "SCAVRUN 1\n", "1: run 1 USR1\n", "0: done\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("output file lacks %q (append mode keeps both runs):\n%s", want, b)
		}
	}
}

// testRequeueRace requeues several jobs as soon as they run. Released in
// the second of its requeue, a job FAILS ("Job credential revoked"); every
// job must instead run again and succeed.
func testRequeueRace(t *testing.T, c *testslurm.Cluster) {
	ctx := testCtx(t, 60*time.Second)
	l := newLauncher(t, c, "", nil)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			var out lines
			h, err := l.Start(ctx, conformance.ShellSpec(t, 2, `echo "run ${SLURM_RESTART_COUNT:-0}"
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then exec sleep 60; fi`, out.add))
			if err != nil {
				t.Errorf("job %d: Start: %v", i, err)
				return
			}
			defer func() { _ = h.Stop(context.Background(), 0) }()
			for !slicesContains(out.of(0), "stdout: run 0") && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
			if _, err := c.Run(ctx, "scontrol", "requeue", h.ID()); err != nil {
				t.Errorf("job %d: %v", i, err)
				return
			}
			res, err := h.Wait(ctx)
			if err != nil || res.ExitCode != 0 || !slicesContains(out.of(1), "stdout: run 1") {
				t.Errorf("job %d (slurm %s): %+v, %v; output %q", i, h.ID(), res, err, out.of(1))
			}
		})
	}
	wg.Wait()
}

// testPreempt sends Slurm's pre-emption warning the way Slurm does: to
// the step's tasks inside an allocation, to the batch shell of a submitted
// job (whose trap forwards it); the workers' USR1 trap must fire.
func testPreempt(t *testing.T, c *testslurm.Cluster, inAlloc bool) {
	ctx := testCtx(t, 60*time.Second)
	jobID := ""
	if inAlloc {
		jobID = c.Hold(t, 2) // its own allocation: the signal goes to every step of it
	}
	l := newLauncher(t, c, jobID, nil)
	var out lines
	h, err := l.Start(ctx, conformance.ShellSpec(t, 2, `trap 'echo "got $SCAV_PREEMPT_SIGNAL"; exit 0' USR1
echo ready; while :; do sleep 0.05; done`, out.add))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = h.Stop(context.Background(), 0) })
	out.await(t, ctx, 0, "ready")
	out.await(t, ctx, 1, "ready")
	args := []string{"--signal=USR1", jobID}
	if !inAlloc {
		args = []string{"--signal=USR1", "--batch", h.ID()}
	}
	if _, err := c.Run(ctx, "scancel", args...); err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(ctx)
	if err != nil || res.ExitCode != 0 || res.FailedRank != -1 {
		t.Fatalf("Result %+v, %v", res, err)
	}
	for r := range 2 {
		if got := out.of(r); !slicesContains(got, "stdout: got USR1") {
			t.Errorf("rank %d output %q: its USR1 trap did not fire", r, got)
		}
	}
}

// testTimeLimitWarning submits a job with a one-minute time limit and a
// grace of 55 s: Slurm itself sends the batch shell USR1 (sbatch
// --signal=B:USR1@55) within about 5-35 s (it checks limits every 30 s),
// and the workers' trap fires.
func testTimeLimitWarning(t *testing.T, c *testslurm.Cluster) {
	ctx := testCtx(t, 75*time.Second)
	l := newLauncher(t, c, "", func(o *Options) {
		o.SbatchArgs = []string{"--time=1"}
		o.Grace = 55 * time.Second
	})
	var out lines
	h, err := l.Start(ctx, conformance.ShellSpec(t, 2, `trap 'echo "got $SCAV_PREEMPT_SIGNAL"; exit 0' USR1
echo ready; while :; do sleep 0.05; done`, out.add))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = h.Stop(context.Background(), 0) })
	res, err := h.Wait(ctx)
	if err != nil || res.ExitCode != 0 || res.FailedRank != -1 {
		t.Fatalf("Result %+v, %v; output %q %q", res, err, out.of(0), out.of(1))
	}
	for r := range 2 {
		if got := out.of(r); !slicesContains(got, "stdout: got USR1") {
			t.Errorf("rank %d output %q: Slurm's warning did not reach its trap", r, got)
		}
	}
}

// testStartWhileBusy starts a step in an allocation whose CPUs another
// step holds: srun waits for them, and when Start's context ends it gives
// up, leaving nothing behind; once the CPUs are free a step starts.
func testStartWhileBusy(t *testing.T, c *testslurm.Cluster) {
	ctx := testCtx(t, 30*time.Second)
	l := newLauncher(t, c, c.Hold(t, 2), nil)
	var out lines
	busy, err := l.Start(ctx, conformance.ShellSpec(t, 2, "echo ready; exec sleep 30", out.add))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	out.await(t, ctx, 1, "ready")
	short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	if h, err := l.Start(short, conformance.ShellSpec(t, 1, "true", nil)); !errors.Is(err, context.DeadlineExceeded) {
		if h != nil {
			_ = h.Stop(ctx, 0)
		}
		t.Fatalf("Start while the allocation is busy = %v, want DeadlineExceeded", err)
	}
	if err := busy.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	h, err := l.Start(ctx, conformance.ShellSpec(t, 2, "true", nil))
	if err != nil {
		t.Fatalf("Start once the CPUs are free: %v", err)
	}
	if res, err := h.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Errorf("Result %+v, %v", res, err)
	}
}

// testModeSelf starts a self-launching command for 3 workers: one task,
// with no rank variables but the {workers} template and the master address.
func testModeSelf(t *testing.T, l *Launcher) {
	ctx := testCtx(t, 30*time.Second)
	var out lines
	spec := conformance.ShellSpec(t, 3, `echo "[$RANK][$WORLD_SIZE][$LOCAL_RANK] $1 $MASTER_ADDR $SCAV_PREEMPT_SIGNAL"`, out.add)
	spec.Command = append(spec.Command, "sh", "{workers}")
	spec.Mode = plugins.ModeSelf
	h, err := l.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	res, err := h.Wait(ctx)
	if err != nil || res.ExitCode != 0 || len(res.Ranks) != 1 {
		t.Fatalf("Result %+v, %v; want one process", res, err)
	}
	if got, want := out.of(0), []string{"stdout: [][][] 3 127.0.0.1 USR1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("output %q, want %q", got, want)
	}
}

// testStopPending stops a submitted job that waits for resources: Stop
// cancels it at once, whatever the grace.
func testStopPending(t *testing.T, c *testslurm.Cluster) {
	ctx := testCtx(t, 30*time.Second)
	l := newLauncher(t, c, "", nil)
	h, err := l.Start(ctx, conformance.ShellSpec(t, c.CPUs-1, "true", nil)) // more than the allocation leaves
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	for {
		st, err := c.JobState(ctx, h.ID())
		if err != nil {
			t.Fatal(err)
		}
		if st == "PENDING" {
			break
		}
		t.Fatalf("job %s is %s, want PENDING", h.ID(), st)
	}
	if err := h.Signal(ctx, syscall.SIGUSR1); err == nil {
		t.Errorf("Signal to a pending job succeeded")
	}
	begin := time.Now()
	if err := h.Stop(ctx, 20*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("Stop of a pending job took %v", took)
	}
	res, err := h.Wait(ctx)
	if err != nil || !res.Stopped || res.FailedRank != -1 || len(res.Ranks) != c.CPUs-1 || !res.Ranks[0].Stopped {
		t.Errorf("Result %+v, %v; want stopped, no failed rank", res, err)
	}
	if st, err := c.JobState(ctx, h.ID()); err != nil || st != "CANCELLED" {
		t.Errorf("job state %s, %v; want CANCELLED", st, err)
	}
}

// testSlurmErrors checks ErrUnsupported for sizes the allocation or
// partition cannot hold and that Slurm's own reason reaches the caller.
func testSlurmErrors(t *testing.T, c *testslurm.Cluster, alloc string) {
	ctx := testCtx(t, 30*time.Second)
	in := newLauncher(t, c, alloc, nil)
	if _, err := in.Start(ctx, conformance.ShellSpec(t, 33, "true", nil)); !errors.Is(err, plugins.ErrUnsupported) {
		t.Errorf("33 workers in a 32-CPU allocation: %v, want ErrUnsupported", err)
	}
	sub := newLauncher(t, c, "", nil)
	big := conformance.ShellSpec(t, 2, "true", nil)
	big.Config.Nodes = 2
	if _, err := sub.Start(ctx, big); !errors.Is(err, plugins.ErrUnsupported) {
		t.Errorf("2 nodes on a 1-node partition: %v, want ErrUnsupported", err)
	}
	bad := newLauncher(t, c, "", func(o *Options) { o.SbatchArgs = []string{"--mem=99999999"} })
	_, err := bad.Start(ctx, conformance.ShellSpec(t, 1, "true", nil))
	if !errors.Is(err, ErrCommand) || !strings.Contains(err.Error(), "sbatch: error:") {
		t.Errorf("sbatch with too much memory: %v, want ErrCommand with sbatch's reason", err)
	}
	t.Logf("sbatch's refusal reads: %v", err)
	// A step that Slurm refuses (more nodes than the allocation has) ends
	// Start with srun's reason.
	badStep := newLauncher(t, c, alloc, func(o *Options) { o.SrunArgs = append(o.SrunArgs, "--nodes=2") })
	_, err = badStep.Start(ctx, conformance.ShellSpec(t, 2, "true", nil))
	if !errors.Is(err, ErrStepStart) || !strings.Contains(err.Error(), "srun: error:") {
		t.Errorf("srun on 2 nodes of a 1-node allocation: %v, want ErrStepStart with srun's reason", err)
	}
	t.Logf("srun's refusal reads: %v", err)
}

// testStepInTheJobsAllocation: a launcher with no allocation of its own runs
// a job whose environment names one (scavctl run inside an allocation, a
// node scavd) as a step of it; such a step cannot be recovered.
func testStepInTheJobsAllocation(t *testing.T, c *testslurm.Cluster, alloc string) {
	ctx := testCtx(t, 60*time.Second)
	l := newLauncher(t, c, "", nil)
	sp := conformance.ShellSpec(t, 2, `echo "$SLURM_JOB_ID $RANK"`, nil)
	sp.Env = []string{"SLURM_JOB_ID=" + alloc}
	h, err := l.Start(ctx, sp)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if res, err := h.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
	if job, step, ok := strings.Cut(h.ID(), "."); !ok || job != alloc || step == "" {
		t.Fatalf("handle %q: want a step of allocation %s", h.ID(), alloc)
	}
	if _, err := l.Recover(ctx, plugins.RecoverSpec{JobID: sp.JobID, Attempt: 1, HandleID: h.ID()}); !errors.Is(err, plugins.ErrUnsupported) {
		t.Errorf("Recover of a step = %v, want ErrUnsupported", err)
	}
}
