package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
)

const helperEnv = "SCAV_LOCAL_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "parent" {
		helperParent()
		return
	}
	os.Exit(m.Run())
}

// helperParent runs in a child test binary: it starts a rank with
// KillOnParentDeath, prints its pid and waits to be killed.
func helperParent() {
	l := New(Options{Logger: zap.NewNop(), KillOnParentDeath: true})
	h, err := l.Start(context.Background(), plugins.AttemptSpec{
		JobID: "orphan", Attempt: 1, Command: []string{"sleep", "1000"},
		Config: plugins.Config{Workers: 1},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(h.ID()) // the pgid is rank 0's pid
	time.Sleep(time.Minute)
	os.Exit(3)
}

func TestNameAndCapabilities(t *testing.T) {
	l := newLauncher(t, Options{MaxWorkers: 8})
	if l.Name() != "local" {
		t.Errorf("Name = %q", l.Name())
	}
	c, err := l.Capabilities(context.Background())
	if err != nil || c.MaxWorkers != 8 || len(c.Hosts) != 1 {
		t.Errorf("Capabilities = %+v, %v", c, err)
	}
}

func TestEnvContract(t *testing.T) {
	t.Setenv("RANK", "99") // inherited contract variables must not leak
	t.Setenv("SCAV_RESTORE", "stale")
	out := newOutput()
	spec := shSpec(t, 3, "env", out)
	spec.Config.GlobalBatch = 96
	spec.Socket = "/run/scav/test.sock"
	spec.CheckpointDir = "/ck"
	spec.Env = []string{"FOO=bar", "PATH=" + os.Getenv("PATH")}
	h, err := newLauncher(t, Options{}).Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	res := waitResult(t, h, 10*time.Second)
	if res.ExitCode != 0 || res.FailedRank != -1 || res.Stopped || len(res.Ranks) != 3 {
		t.Fatalf("result = %+v", res)
	}
	if h.ID() != strconv.Itoa(res.Ranks[0].PID) {
		t.Errorf("ID %s is not rank 0's pid %d", h.ID(), res.Ranks[0].PID)
	}
	ports := map[string]bool{}
	for r := 0; r < 3; r++ {
		env := map[string]string{}
		for _, l := range out.get(r, plugins.Stdout) {
			if k, v, ok := strings.Cut(l, "="); ok {
				env[k] = v
			}
		}
		want := map[string]string{
			"RANK": strconv.Itoa(r), "WORLD_SIZE": "3", "LOCAL_RANK": strconv.Itoa(r), "LOCAL_WORLD_SIZE": "3",
			"MASTER_ADDR": "127.0.0.1", "SCAV_JOB_ID": spec.JobID, "SCAV_ATTEMPT": "1",
			"SCAV_SOCKET": "/run/scav/test.sock", "SCAV_GLOBAL_BATCH": "96", "SCAV_LOCAL_BATCH": "32",
			"SCAV_LR_SCALE": "1", "SCAV_CHECKPOINT_DIR": "/ck", "SCAV_RESTORE": "", "FOO": "bar",
		}
		for k, v := range want {
			if got, ok := env[k]; !ok || got != v {
				t.Errorf("rank %d: %s = %q (set %v), want %q", r, k, got, ok, v)
			}
		}
		if p, _ := strconv.Atoi(env["MASTER_PORT"]); p <= 0 {
			t.Errorf("rank %d: MASTER_PORT = %q", r, env["MASTER_PORT"])
		}
		ports[env["MASTER_PORT"]] = true
		if rr := res.Ranks[r]; rr.Rank != r || rr.ExitCode != 0 || rr.Stopped || rr.PID <= 0 {
			t.Errorf("rank result %+v", rr)
		}
	}
	if len(ports) != 1 {
		t.Errorf("ranks saw different master ports %v", ports)
	}
}

func TestSelfModeAndTemplate(t *testing.T) {
	t.Setenv("WORLD_SIZE", "99")
	out := newOutput()
	spec := shSpec(t, 4, `echo "w={workers} b={batch_size} l={local_batch_size} rank=${RANK-unset} ws=${WORLD_SIZE-unset} port=${MASTER_PORT} job=${SCAV_JOB_ID}"`, out)
	spec.Config.GlobalBatch = 64
	spec.Mode = plugins.ModeSelf
	h, err := newLauncher(t, Options{}).Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	res := waitResult(t, h, 10*time.Second)
	if len(res.Ranks) != 1 || res.ExitCode != 0 {
		t.Fatalf("self mode started %d processes, result %+v", len(res.Ranks), res)
	}
	lines := out.get(0, plugins.Stdout)
	if len(lines) != 1 {
		t.Fatalf("output %q", lines)
	}
	prefix := "w=4 b=64 l=16 rank=unset ws=unset port="
	if !strings.HasPrefix(lines[0], prefix) || !strings.HasSuffix(lines[0], " job="+spec.JobID) {
		t.Errorf("line %q, want %q...", lines[0], prefix)
	}
}

// TestRankFailureStopsOthers: rank 1 exits 3 while rank 0 (which has a
// TERM-immune grandchild) and rank 2 run; the others are stopped, nothing is
// left, and with the reaper not even a zombie.
func TestRankFailureStopsOthers(t *testing.T) {
	for _, withReaper := range []bool{false, true} {
		t.Run(fmt.Sprintf("reaper=%v", withReaper), func(t *testing.T) {
			opts := Options{Grace: 30 * time.Second} // TERM alone must suffice
			if withReaper {
				r, err := StartReaper(context.Background(), zap.NewNop())
				if err != nil {
					t.Fatal(err)
				}
				defer r.Stop()
				opts.Reaper = r
			}
			script := `case $RANK in
0) sh -c 'trap "" TERM; exec sleep 1000' & echo $! > gc.tmp; mv gc.tmp gc; echo ready; wait ;;
1) while [ ! -e gc ]; do sleep 0.01; done; echo failing >&2; exit 3 ;;
*) exec sleep 1000 ;;
esac`
			spec := shSpec(t, 3, script, newOutput())
			start := time.Now()
			h, err := newLauncher(t, opts).Start(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			res := waitResult(t, h, 20*time.Second)
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("attempt took %v", d)
			}
			if res.ExitCode != 3 || res.FailedRank != 1 || res.Stopped {
				t.Errorf("result = %+v, want exit 3 from rank 1, not stopped", res)
			}
			if rr := res.Ranks[1]; rr.ExitCode != 3 || rr.Stopped {
				t.Errorf("rank 1 = %+v", rr)
			}
			for _, r := range []int{0, 2} {
				if rr := res.Ranks[r]; !rr.Stopped || rr.ExitCode != 128+int(syscall.SIGTERM) || rr.Signal != "SIGTERM" {
					t.Errorf("rank %d = %+v, want stopped by SIGTERM", r, rr)
				}
			}
			gc := readPID(t, filepath.Join(spec.Dir, "gc"))
			for _, rr := range res.Ranks {
				assertGone(t, rr.PID, !withReaper)
			}
			assertGone(t, gc, !withReaper)
			if err := h.Signal(context.Background(), syscall.SIGUSR1); !errors.Is(err, plugins.ErrFinished) {
				t.Errorf("Signal after the end = %v, want ErrFinished", err)
			}
		})
	}
}

func TestStopGrace(t *testing.T) {
	t.Run("term trapped, clean exit within grace", func(t *testing.T) {
		out := newOutput()
		spec := shSpec(t, 2, `trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.05; done`, out)
		h, err := newLauncher(t, Options{}).Start(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "ranks ready", func() bool {
			return out.has(0, plugins.Stdout, "ready") && out.has(1, plugins.Stdout, "ready")
		})
		start := time.Now()
		if err := h.Stop(context.Background(), 20*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Stop took %v; the ranks exit on TERM", d)
		}
		res := waitResult(t, h, time.Second)
		if !res.Stopped || res.ExitCode != 0 || res.FailedRank != -1 {
			t.Errorf("result = %+v", res)
		}
		for r, rr := range res.Ranks {
			if rr.ExitCode != 0 || rr.Signal != "" || !rr.Stopped {
				t.Errorf("rank %d = %+v, want clean exit, stopped", r, rr)
			}
			if !out.has(r, plugins.Stdout, "bye") {
				t.Errorf("rank %d did not run its TERM trap", r)
			}
			assertGone(t, rr.PID, false) // reaped by the launcher
		}
	})

	t.Run("term ignored, killed after grace", func(t *testing.T) {
		out := newOutput()
		spec := shSpec(t, 2, `trap '' TERM; echo ready; while :; do sleep 0.05; done`, out)
		h, err := newLauncher(t, Options{}).Start(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "ranks ready", func() bool {
			return out.has(0, plugins.Stdout, "ready") && out.has(1, plugins.Stdout, "ready")
		})
		// A Stop whose ctx ends first returns its error; the stop goes on.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err = h.Stop(ctx, time.Hour)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop with a short ctx = %v", err)
		}
		if err := h.Signal(context.Background(), syscall.SIGUSR1); !errors.Is(err, plugins.ErrStopped) {
			t.Errorf("Signal while stopping = %v, want ErrStopped", err)
		}
		// A second Stop with a shorter grace brings the SIGKILL forward.
		const grace = 300 * time.Millisecond
		start := time.Now()
		if err := h.Stop(context.Background(), grace); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < grace || d > 5*time.Second {
			t.Errorf("Stop took %v, want about %v", d, grace)
		}
		res := waitResult(t, h, time.Second)
		if !res.Stopped || res.ExitCode != 0 || res.FailedRank != -1 {
			t.Errorf("result = %+v", res)
		}
		for r, rr := range res.Ranks {
			if rr.Signal != "SIGKILL" || rr.ExitCode != 137 || !rr.Stopped {
				t.Errorf("rank %d = %+v, want SIGKILL", r, rr)
			}
			assertGone(t, rr.PID, false)
		}
		// Stop is idempotent once finished.
		if err := h.Stop(context.Background(), 0); err != nil {
			t.Errorf("second Stop = %v", err)
		}
	})
}

func TestOutputLines(t *testing.T) {
	out := newOutput()
	spec := shSpec(t, 2, `echo "out $RANK"; echo "err $RANK" >&2
if [ "$RANK" = 1 ]; then head -c 1048576 /dev/zero | tr '\0' a; echo; printf 'crlf\r\n'; fi
printf 'end %s' "$RANK"`, out)
	h, err := newLauncher(t, Options{}).Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res := waitResult(t, h, 20*time.Second); res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	if got, want := out.get(0, plugins.Stdout), []string{"out 0", "end 0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rank 0 stdout %q, want %q", got, want)
	}
	for r := 0; r < 2; r++ {
		if got, want := out.get(r, plugins.Stderr), []string{fmt.Sprintf("err %d", r)}; !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d stderr %q, want %q", r, got, want)
		}
	}
	lines := out.get(1, plugins.Stdout)
	if len(lines) < 4 || lines[0] != "out 1" || lines[len(lines)-2] != "crlf" || lines[len(lines)-1] != "end 1" {
		t.Fatalf("rank 1 stdout has %d lines, first %.20q, last %.20q", len(lines), lines[0], lines[len(lines)-1])
	}
	var long strings.Builder
	for _, piece := range lines[1 : len(lines)-2] {
		if len(piece) > DefaultMaxLineBytes {
			t.Errorf("piece of %d bytes exceeds %d", len(piece), DefaultMaxLineBytes)
		}
		long.WriteString(piece)
	}
	if long.Len() != 1<<20 || strings.Trim(long.String(), "a") != "" {
		t.Errorf("the 1 MiB line came back as %d bytes", long.Len())
	}
}

func TestWaitIdempotent(t *testing.T) {
	spec := shSpec(t, 2, `sleep 0.1; exit $RANK`, nil)
	h, err := newLauncher(t, Options{}).Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]plugins.Result, 8)
	for i := range results {
		wg.Go(func() { results[i] = waitResult(t, h, 10*time.Second) })
	}
	wg.Wait()
	again := waitResult(t, h, time.Second)
	for i, r := range append(results, again) {
		if !reflect.DeepEqual(r, results[0]) {
			t.Errorf("Wait %d = %+v, want %+v", i, r, results[0])
		}
	}
	if results[0].ExitCode != 1 || results[0].FailedRank != 1 {
		t.Errorf("result %+v, want rank 1 failing with 1", results[0])
	}

	// Wait returns ctx's error while the attempt runs.
	h2, err := newLauncher(t, Options{}).Start(context.Background(), shSpec(t, 1, "exec sleep 1000", nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h2.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled ctx = %v", err)
	}
	if err := h2.Stop(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
}

func TestStartErrors(t *testing.T) {
	l := newLauncher(t, Options{MaxWorkers: 2})
	bad := shSpec(t, 3, "true", nil)
	bad.Config.GlobalBatch = 10
	bad.Env = []string{"RANK=1"}
	_, err := l.Start(context.Background(), bad)
	if !errors.Is(err, plugins.ErrInvalidSpec) || !strings.Contains(err.Error(), "not divisible") || !strings.Contains(err.Error(), "RANK") {
		t.Errorf("invalid spec: %v", err)
	}
	nodes := shSpec(t, 2, "true", nil)
	nodes.Config.Nodes = 2
	if _, err := l.Start(context.Background(), nodes); !errors.Is(err, plugins.ErrUnsupported) {
		t.Errorf("2 nodes: %v", err)
	}
	if _, err := l.Start(context.Background(), shSpec(t, 3, "true", nil)); !errors.Is(err, plugins.ErrUnsupported) {
		t.Errorf("3 workers over a cap of 2: %v", err)
	}
	missing := shSpec(t, 2, "", nil)
	missing.Command = []string{"/nonexistent/scav-test-program"}
	if _, err := l.Start(context.Background(), missing); err == nil || !strings.Contains(err.Error(), "start rank 0 of job") {
		t.Errorf("missing program: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Start(ctx, shSpec(t, 1, "true", nil)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: %v", err)
	}
}

// TestKillOnParentDeath SIGKILLs a process that embeds the launcher and
// checks that its worker dies with it.
func TestKillOnParentDeath(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=parent")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("read worker pid from helper: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper printed %q", line)
	}
	if s := procState(t, pid); s == 0 || s == 'Z' {
		t.Fatalf("worker %d not running (state %q)", pid, s)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	eventually(t, 5*time.Second, "worker to die with its parent", func() bool {
		s := procState(t, pid)
		return s == 0 || s == 'Z'
	})
}

func TestSignal(t *testing.T) {
	out := newOutput()
	spec := shSpec(t, 2, `trap 'echo usr1' USR1; echo ready; while :; do sleep 0.05; done`, out)
	h, err := newLauncher(t, Options{}).Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "ranks ready", func() bool {
		return out.has(0, plugins.Stdout, "ready") && out.has(1, plugins.Stdout, "ready")
	})
	if err := h.Signal(context.Background(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "both ranks to see SIGUSR1", func() bool {
		return out.has(0, plugins.Stdout, "usr1") && out.has(1, plugins.Stdout, "usr1")
	})
	if err := h.Stop(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
}

// TestEscapedProcessHoldingOutput: a descendant that leaves the attempt's
// process group and keeps its stdout open must not keep Wait from returning.
func TestEscapedProcessHoldingOutput(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	out := newOutput()
	spec := shSpec(t, 1, `setsid sh -c 'echo $$ > escaped.tmp; mv escaped.tmp escaped; exec sleep 1000' &
while [ ! -e escaped ]; do sleep 0.01; done; echo done`, out)
	h, err := newLauncher(t, Options{}).Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	escaped := readPID(t, filepath.Join(spec.Dir, "escaped"))
	defer func() { _ = syscall.Kill(escaped, syscall.SIGKILL) }()
	start := time.Now()
	res := waitResult(t, h, 10*time.Second)
	if d := time.Since(start); d > outputDrainTimeout+3*time.Second {
		t.Errorf("Wait took %v", d)
	}
	if res.ExitCode != 0 || !out.has(0, plugins.Stdout, "done") {
		t.Errorf("result %+v, output %q", res, out.get(0, plugins.Stdout))
	}
}

// TestSetsidChildrenEndWithTheJob (issue 21): a worker's children that
// leave its process group (setsid) are in the attempt's cgroup while it
// runs, end with it, and, with the reaper, leave no zombie: one that ran
// on after the attempt, and one that had exited before it ended.
func TestSetsidChildrenEndWithTheJob(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	if base, _ := cgroupBase(); base == "" {
		t.Skip("no writable cgroup-v2 hierarchy (not root?)")
	}
	r, err := StartReaper(context.Background(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	spec := shSpec(t, 1, `setsid sh -c 'echo $$ > long.tmp; mv long.tmp long; exec sleep 1000' &
setsid sh -c 'echo $$ > short.tmp; mv short.tmp short; sleep 0.2' &
while [ ! -e long ] || [ ! -e short ]; do sleep 0.01; done
while [ ! -e go ]; do sleep 0.01; done`, nil)
	h, err := newLauncher(t, Options{Reaper: r}).Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	long, short := readPID(t, filepath.Join(spec.Dir, "long")), readPID(t, filepath.Join(spec.Dir, "short"))
	defer func() { _ = syscall.Kill(long, syscall.SIGKILL) }()
	a := h.(*attempt)
	for _, pid := range []int{long, short} {
		if !a.cg.holds(pid) {
			p, _ := cgroupOf(pid)
			t.Errorf("process %d is in cgroup %q, not the attempt's %q", pid, p, a.cg.rel)
		}
	}
	time.Sleep(400 * time.Millisecond) // the short one exits, an orphan of this process's
	if err := os.WriteFile(filepath.Join(spec.Dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if res := waitResult(t, h, 20*time.Second); res.ExitCode != 0 {
		t.Errorf("result %+v", res)
	}
	assertGone(t, long, false)
	assertGone(t, short, false)
	if _, err := os.Stat(a.cg.dir); !os.IsNotExist(err) {
		t.Errorf("the attempt's cgroup %s is left: %v", a.cg.dir, err)
	}
}

// countSignals is a rank (argv[1] "rank") or its setsid child ("child"):
// it blocks signal argv[2], marks itself ready, and once the file "go"
// exists, writes how many copies of the signal were queued for it. A
// real-time signal queues every copy, where a second SIGTERM merges with a
// pending one only by luck.
const countSignals = `import os, signal, subprocess, sys, time
role, sig = sys.argv[1], int(sys.argv[2])
signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
child = None
if role == "rank":
    child = subprocess.Popen([sys.executable, sys.argv[0], "child", str(sig)], start_new_session=True)
    while not os.path.exists("child.ready"):
        time.sleep(0.01)
open(role + ".ready", "w").close()
while not os.path.exists("go"):
    time.sleep(0.01)
n = 0
while signal.sigtimedwait([sig], 0.3) is not None:
    n += 1
with open(role + ".count.tmp", "w") as f:
    f.write(str(n))
os.rename(role + ".count.tmp", role + ".count")
if child:
    child.wait()
`

// TestEscalateSignalsEachProcessOnce: a stop's signal reaches each process
// of the attempt once, whether it is in the attempt's process group (which
// is signalled, and is in the cgroup too) or left it (setsid: signalled
// through the cgroup). A worker whose TERM handler ran twice printed its
// goodbye twice in CI.
func TestEscalateSignalsEachProcessOnce(t *testing.T) {
	if base, _ := cgroupBase(); base == "" {
		t.Skip("no writable cgroup-v2 hierarchy (not root?)")
	}
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skip("no " + python)
	}
	sig := syscall.Signal(40) // real-time (SIGRTMIN is 34 or 35)
	spec := shSpec(t, 1, "", nil)
	if err := os.WriteFile(filepath.Join(spec.Dir, "count.py"), []byte(countSignals), 0o644); err != nil {
		t.Fatal(err)
	}
	spec.Command = []string{python, "count.py", "rank", strconv.Itoa(int(sig))}
	h, err := newLauncher(t, Options{}).Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "rank and child ready", func() bool {
		_, err := os.Stat(filepath.Join(spec.Dir, "rank.ready"))
		return err == nil
	})
	h.(*attempt).Escalate(context.Background(), sig)
	if err := os.WriteFile(filepath.Join(spec.Dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if res := waitResult(t, h, 20*time.Second); res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	for _, role := range []string{"rank", "child"} {
		b, err := os.ReadFile(filepath.Join(spec.Dir, role+".count"))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != "1" {
			t.Errorf("the %s got the signal %s times, want once", role, b)
		}
	}
}
