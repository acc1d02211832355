// Package conformance is the test suite every launcher must pass, in
// process or over gRPC. It runs real /bin/sh workers, so it needs a Unix
// host with sh, sleep and kill.
//
// A launcher's tests call Run:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T) plugins.Launcher { return newTestLauncher(t) })
//	}
package conformance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/plugins"
)

// testTimeout bounds every subtest.
const testTimeout = 30 * time.Second

// Run runs the suite against the launchers newLauncher makes; it is called
// once per subtest, and the launcher it returns must stay usable until the
// subtest's cleanups have run (register its closing with t.Cleanup). The
// subtests run in parallel. A launcher's grace for the peers of a failed
// rank should be short (a second or less) to keep the suite fast.
func Run(t *testing.T, newLauncher func(t *testing.T) plugins.Launcher) {
	tests := []struct {
		name string
		fn   func(t *testing.T, ctx context.Context, l plugins.Launcher)
	}{
		{"NameAndCapabilities", testNameAndCapabilities},
		{"EnvPerRank", testEnvPerRank},
		{"EnvBatchUnknown", testEnvBatchUnknown},
		{"NoOutput", testNoOutput},
		{"FailedRank", testFailedRank},
		{"KilledBySignal", testKilledBySignal},
		{"StopWithGrace", testStopWithGrace},
		{"StopPrompt", testStopPrompt},
		{"Signal", testSignal},
		{"WaitIdempotent", testWaitIdempotent},
		{"InvalidSpec", testInvalidSpec},
		{"StartCancelled", testStartCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			t.Cleanup(cancel)
			tt.fn(t, ctx, newLauncher(t))
		})
	}
}

// output collects the lines of an attempt.
type output struct {
	mu    sync.Mutex
	lines []line
}

type line struct {
	rank   int
	stream plugins.Stream
	text   string
}

func (o *output) add(rank int, stream plugins.Stream, text string) {
	o.mu.Lock()
	o.lines = append(o.lines, line{rank, stream, text})
	o.mu.Unlock()
}

// of returns the lines of one rank and stream, in order.
func (o *output) of(rank int, stream plugins.Stream) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, l := range o.lines {
		if l.rank == rank && l.stream == stream {
			out = append(out, l.text)
		}
	}
	return out
}

// count returns how many lines, of any rank and stream, are text.
func (o *output) count(text string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, l := range o.lines {
		if l.text == text {
			n++
		}
	}
	return n
}

// awaitCount polls until text has been seen n times.
func (o *output) awaitCount(t *testing.T, ctx context.Context, text string, n int) {
	t.Helper()
	for o.count(text) < n {
		select {
		case <-ctx.Done():
			t.Fatalf("saw %q %d times, want %d: %v", text, o.count(text), n, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ShellSpec returns a valid spec, named after the test, that runs script
// with /bin/sh on workers ranks and hands their output to out (nil: none).
// Launchers' own tests use it too.
func ShellSpec(t testing.TB, workers int, script string, out plugins.OutputFunc) plugins.AttemptSpec {
	return plugins.AttemptSpec{
		JobID:   strings.ReplaceAll(t.Name(), "/", "-"),
		Attempt: 1,
		Command: []string{"/bin/sh", "-c", script},
		Dir:     t.TempDir(),
		Config:  plugins.Config{Workers: workers},
		Mode:    plugins.ModeRanks,
		Output:  out,
	}
}

// spec is ShellSpec with this suite's output collector.
func spec(t *testing.T, workers int, script string, out *output) plugins.AttemptSpec {
	if out == nil {
		return ShellSpec(t, workers, script, nil)
	}
	return ShellSpec(t, workers, script, out.add)
}

// start starts s and makes sure the attempt is gone when the test ends.
func start(t *testing.T, ctx context.Context, l plugins.Launcher, s plugins.AttemptSpec) plugins.Handle {
	t.Helper()
	h, err := l.Start(ctx, s)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if h.ID() == "" {
		t.Errorf("handle ID is empty")
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Stop(sctx, 0); err != nil {
			t.Errorf("cleanup Stop: %v", err)
		}
	})
	return h
}

func wait(t *testing.T, ctx context.Context, h plugins.Handle) plugins.Result {
	t.Helper()
	res, err := h.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return res
}

func testNameAndCapabilities(t *testing.T, ctx context.Context, l plugins.Launcher) {
	if l.Name() == "" {
		t.Errorf("Name is empty")
	}
	c, err := l.Capabilities(ctx)
	if err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	if c.MaxWorkers < 0 {
		t.Errorf("MaxWorkers = %d, want >= 0", c.MaxWorkers)
	}
}

func testEnvPerRank(t *testing.T, ctx context.Context, l plugins.Launcher) {
	var out output
	s := spec(t, 3, `echo "$RANK|$WORLD_SIZE|$LOCAL_RANK|$LOCAL_WORLD_SIZE|$SCAV_JOB_ID|$SCAV_ATTEMPT|$SCAV_GLOBAL_BATCH|$SCAV_LOCAL_BATCH|$SCAV_LR_SCALE|$SCAV_CHECKPOINT_DIR|$SCAV_RESTORE|$SCAV_START_STEP|$SCAV_SOCKET|$FOO|$1"
echo second
[ -n "$MASTER_ADDR" ] && [ -n "$MASTER_PORT" ] && echo "master $MASTER_ADDR:$MASTER_PORT" >&2
exit 0`, &out)
	s.Command = append(s.Command, "sh", "{workers}x{batch_size}x{local_batch_size}")
	s.Attempt = 2
	s.Config = plugins.Config{Workers: 3, GlobalBatch: 12, LRScale: 0.5}
	s.Env = []string{"FOO=bar baz"}
	s.CheckpointDir = "/ck"
	s.Restore = "/ck/step-7"
	s.StartStep = 7
	s.Socket = "/run/scav.sock"
	res := wait(t, ctx, start(t, ctx, l, s))

	if res.ExitCode != 0 || res.FailedRank != -1 || res.Stopped || len(res.Ranks) != 3 {
		t.Fatalf("Result = %+v, want exit 0, failed rank -1, not stopped, 3 ranks", res)
	}
	var master string
	for r := range 3 {
		want := []string{
			fmt.Sprintf("%d|3|%d|3|%s|2|12|4|0.5|/ck|/ck/step-7|7|/run/scav.sock|bar baz|3x12x4", r, r, s.JobID),
			"second",
		}
		if got := out.of(r, plugins.Stdout); !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d stdout = %q, want %q", r, got, want)
		}
		stderr := out.of(r, plugins.Stderr)
		if len(stderr) != 1 || !strings.HasPrefix(stderr[0], "master ") {
			t.Errorf("rank %d stderr = %q, want one master line", r, stderr)
			continue
		}
		if r == 0 {
			master = stderr[0]
		} else if stderr[0] != master {
			t.Errorf("rank %d sees %q, rank 0 %q", r, stderr[0], master)
		}
		rr := res.Ranks[r]
		if rr.Rank != r || rr.ExitCode != 0 || rr.Stopped || rr.Signal != "" {
			t.Errorf("Ranks[%d] = %+v, want rank %d exit 0", r, rr, r)
		}
	}
}

// testEnvBatchUnknown: a job without a batch (GlobalBatch 0) gets no batch
// variables at all, never "0", so that a script's own default applies.
func testEnvBatchUnknown(t *testing.T, ctx context.Context, l plugins.Launcher) {
	var out output
	s := spec(t, 2, `echo "${SCAV_GLOBAL_BATCH-unset}|${SCAV_LOCAL_BATCH-unset}|$WORLD_SIZE"`, &out)
	res := wait(t, ctx, start(t, ctx, l, s))
	if res.ExitCode != 0 || len(res.Ranks) != 2 {
		t.Fatalf("Result = %+v, want exit 0 with 2 ranks", res)
	}
	for r := range 2 {
		if got, want := out.of(r, plugins.Stdout), []string{"unset|unset|2"}; !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d stdout = %q, want %q (batch variables unset without a batch)", r, got, want)
		}
	}
}

func testNoOutput(t *testing.T, ctx context.Context, l plugins.Launcher) {
	res := wait(t, ctx, start(t, ctx, l, spec(t, 2, "echo ignored; echo ignored >&2", nil)))
	if res.ExitCode != 0 || res.FailedRank != -1 || len(res.Ranks) != 2 {
		t.Fatalf("Result = %+v, want exit 0 with 2 ranks", res)
	}
}

func testFailedRank(t *testing.T, ctx context.Context, l plugins.Launcher) {
	var out output
	h := start(t, ctx, l, spec(t, 2, `if [ "$RANK" = 1 ]; then echo failing >&2; exit 3; fi; exec sleep 30`, &out))
	res := wait(t, ctx, h)
	if res.ExitCode != 3 || res.FailedRank != 1 || res.Stopped || len(res.Ranks) != 2 {
		t.Fatalf("Result = %+v, want exit 3 from rank 1, not stopped, 2 ranks", res)
	}
	if r := res.Ranks[1]; r.ExitCode != 3 || r.Stopped {
		t.Errorf("Ranks[1] = %+v, want exit 3, not stopped", r)
	}
	if r := res.Ranks[0]; !r.Stopped {
		t.Errorf("Ranks[0] = %+v, want stopped by the launcher", r)
	}
	if got := out.of(1, plugins.Stderr); !reflect.DeepEqual(got, []string{"failing"}) {
		t.Errorf("rank 1 stderr = %q, want [failing]", got)
	}
	// A finished attempt cannot be signalled; stopping it does nothing.
	if err := h.Signal(ctx, syscall.SIGUSR1); !errors.Is(err, plugins.ErrFinished) {
		t.Errorf("Signal after the end = %v, want ErrFinished", err)
	}
	if err := h.Stop(ctx, 0); err != nil {
		t.Errorf("Stop after the end = %v, want nil", err)
	}
	if again := wait(t, ctx, h); again.Stopped || !reflect.DeepEqual(again, res) {
		t.Errorf("Wait after Stop = %+v, want %+v", again, res)
	}
}

func testKilledBySignal(t *testing.T, ctx context.Context, l plugins.Launcher) {
	res := wait(t, ctx, start(t, ctx, l, spec(t, 1, `kill -KILL $$`, nil)))
	if res.ExitCode != 128+9 || res.FailedRank != 0 {
		t.Fatalf("Result = %+v, want exit 137 from rank 0", res)
	}
	if r := res.Ranks[0]; r.Signal != "SIGKILL" || r.ExitCode != 137 {
		t.Errorf("Ranks[0] = %+v, want SIGKILL, exit 137", r)
	}
}

func testStopWithGrace(t *testing.T, ctx context.Context, l plugins.Launcher) {
	var out output
	h := start(t, ctx, l, spec(t, 2, `trap '' TERM; echo ready; while :; do sleep 0.05; done`, &out))
	out.awaitCount(t, ctx, "ready", 2)
	const grace = 300 * time.Millisecond
	begin := time.Now()
	if err := h.Stop(ctx, grace); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if took := time.Since(begin); took < grace {
		t.Errorf("Stop returned after %v, before the grace of %v ended (the workers ignore SIGTERM)", took, grace)
	}
	res := wait(t, ctx, h)
	if !res.Stopped || res.FailedRank != -1 || len(res.Ranks) != 2 {
		t.Fatalf("Result = %+v, want stopped, no failed rank, 2 ranks", res)
	}
	for _, r := range res.Ranks {
		if !r.Stopped || r.Signal != "SIGKILL" {
			t.Errorf("rank %+v, want stopped by SIGKILL", r)
		}
	}
	if err := h.Stop(ctx, grace); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func testStopPrompt(t *testing.T, ctx context.Context, l plugins.Launcher) {
	var out output
	h := start(t, ctx, l, spec(t, 2, `echo ready; exec sleep 30`, &out))
	out.awaitCount(t, ctx, "ready", 2)
	begin := time.Now()
	if err := h.Stop(ctx, 20*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("Stop took %v; workers that obey SIGTERM should not wait for the grace", took)
	}
	res := wait(t, ctx, h)
	if !res.Stopped || res.FailedRank != -1 {
		t.Fatalf("Result = %+v, want stopped, no failed rank", res)
	}
	for _, r := range res.Ranks {
		if !r.Stopped || r.Signal != "SIGTERM" {
			t.Errorf("rank %+v, want stopped by SIGTERM", r)
		}
	}
	if err := h.Signal(ctx, syscall.SIGUSR1); !errors.Is(err, plugins.ErrFinished) {
		t.Errorf("Signal after Stop = %v, want ErrFinished", err)
	}
}

func testSignal(t *testing.T, ctx context.Context, l plugins.Launcher) {
	var out output
	h := start(t, ctx, l, spec(t, 1, `trap 'echo got-usr1; exit 7' USR1; echo ready; while :; do sleep 0.05; done`, &out))
	out.awaitCount(t, ctx, "ready", 1)
	if err := h.Signal(ctx, syscall.SIGUSR1); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	res := wait(t, ctx, h)
	if res.ExitCode != 7 || res.FailedRank != 0 || res.Stopped {
		t.Fatalf("Result = %+v, want exit 7 from rank 0", res)
	}
	if got := out.of(0, plugins.Stdout); !reflect.DeepEqual(got, []string{"ready", "got-usr1"}) {
		t.Errorf("stdout = %q, want [ready got-usr1]", got)
	}
}

func testWaitIdempotent(t *testing.T, ctx context.Context, l plugins.Launcher) {
	var out output
	h := start(t, ctx, l, spec(t, 2, `echo ready; exec sleep 30`, &out))
	out.awaitCount(t, ctx, "ready", 2)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := h.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a running attempt with an expiring context = %v, want DeadlineExceeded", err)
	}

	const waiters = 4
	results := make([]plugins.Result, waiters)
	errs := make([]error, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() { results[i], errs[i] = h.Wait(ctx) })
	}
	if err := h.Stop(ctx, 0); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	wg.Wait()
	first := wait(t, ctx, h)
	if !first.Stopped || len(first.Ranks) != 2 {
		t.Fatalf("Result = %+v, want stopped with 2 ranks", first)
	}
	for i := range waiters {
		if errs[i] != nil || !reflect.DeepEqual(results[i], first) {
			t.Errorf("concurrent Wait %d = %+v, %v; want %+v", i, results[i], errs[i], first)
		}
	}
	// A caller may modify its Result without changing the next one.
	first.Ranks[0].ExitCode = 99
	if again := wait(t, ctx, h); again.Ranks[0].ExitCode == 99 {
		t.Errorf("Wait returned a Result sharing Ranks with an earlier one")
	}
}

func testInvalidSpec(t *testing.T, ctx context.Context, l plugins.Launcher) {
	tests := []struct {
		name string
		spec plugins.AttemptSpec
		want string
	}{
		{"no workers", plugins.AttemptSpec{JobID: "j", Attempt: 1, Command: []string{"/bin/true"}}, "workers 0"},
		{"empty command", plugins.AttemptSpec{JobID: "j", Attempt: 1, Config: plugins.Config{Workers: 1}}, "command is empty"},
		{"reserved env", plugins.AttemptSpec{JobID: "j", Attempt: 1, Command: []string{"/bin/true"},
			Config: plugins.Config{Workers: 1}, Env: []string{"RANK=3"}}, "RANK"},
	}
	for _, tt := range tests {
		h, err := l.Start(ctx, tt.spec)
		if !errors.Is(err, plugins.ErrInvalidSpec) {
			if h != nil {
				_ = h.Stop(ctx, 0)
			}
			t.Errorf("%s: Start = %v, want ErrInvalidSpec", tt.name, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %q does not mention %q", tt.name, err, tt.want)
		}
	}
}

func testStartCancelled(t *testing.T, ctx context.Context, l plugins.Launcher) {
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	h, err := l.Start(cctx, spec(t, 1, "exec sleep 30", nil))
	if err == nil {
		_ = h.Stop(ctx, 0)
		t.Fatalf("Start with a cancelled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a cancelled context = %v, want context.Canceled", err)
	}
}

// RunRecover checks a launcher that implements plugins.Recoverer: an
// attempt started by one instance is reattached by another, as after a
// daemon restart; the second gets the output written from then on and the
// attempt's result, again on a second Recover after the attempt finished;
// an id it never started is ErrUnknownHandle. newLauncher is called twice.
func RunRecover(t *testing.T, newLauncher func(t *testing.T) plugins.Launcher) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	var before, after output
	sp := spec(t, 2, `echo before; sleep 2; echo "after $RANK"; if [ "$RANK" = 1 ]; then exit 3; fi`, &before)
	h := start(t, ctx, newLauncher(t), sp)
	before.awaitCount(t, ctx, "before", 2)

	rec, ok := newLauncher(t).(plugins.Recoverer)
	if !ok {
		t.Fatal("the launcher does not implement plugins.Recoverer")
	}
	rs := plugins.RecoverSpec{JobID: sp.JobID, Attempt: sp.Attempt, HandleID: h.ID(), Output: after.add}
	h2, err := rec.Recover(ctx, rs)
	if err != nil {
		t.Fatalf("Recover(%s): %v", h.ID(), err)
	}
	res, err := h2.Wait(ctx)
	if err != nil || res.ExitCode != 3 || res.FailedRank != 1 {
		t.Fatalf("Wait after Recover = %+v, %v; want exit 3 from rank 1", res, err)
	}
	for r := range 2 {
		if got := after.of(r, plugins.Stdout); !slices.Contains(got, fmt.Sprintf("after %d", r)) {
			t.Errorf("rank %d output after Recover: %q, want the line written after it", r, got)
		}
	}
	rs.Output = nil
	h3, err := rec.Recover(ctx, rs)
	if err != nil {
		t.Fatalf("Recover of the finished attempt: %v", err)
	}
	if res, err := h3.Wait(ctx); err != nil || res.ExitCode != 3 {
		t.Fatalf("Wait on the finished attempt = %+v, %v; want exit 3", res, err)
	}
	rs.HandleID = "no-such-attempt"
	if _, err := rec.Recover(ctx, rs); !errors.Is(err, plugins.ErrUnknownHandle) {
		t.Errorf("Recover(%q) = %v, want ErrUnknownHandle", rs.HandleID, err)
	}
}
