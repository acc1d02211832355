package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/internal/subreaper"
	"github.com/scavenger-ml/scavenger/launchers/supervisor"
	"github.com/scavenger-ml/scavenger/plugins"
)

// TestMain makes the test process the reaper of what its shells orphan, so
// that no zombie outlives the tests on a machine whose PID 1 does not reap.
func TestMain(m *testing.M) {
	if err := subreaper.Become(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// procs is a supervisor.Ranks over real /bin/sh processes, one per rank,
// each leading its own process group. A rank that exits with lostCode
// stands for one whose host was lost (ssh's 255).
type procs struct {
	t        *testing.T
	cmds     []*exec.Cmd
	dir      string // $D of the scripts
	lostCode int
	end      supervisor.End
	gate     chan struct{} // when set, Deliver waits for it to close

	mu        sync.Mutex
	exited    []bool
	escalated []syscall.Signal
	finishes  int
	delivered chan struct{} // closed when a Deliver begins
}

// startProcs starts one shell per script, with $D a fresh directory.
func startProcs(t *testing.T, scripts ...string) *procs {
	t.Helper()
	p := &procs{t: t, dir: t.TempDir(), exited: make([]bool, len(scripts)), delivered: make(chan struct{})}
	for i, s := range scripts {
		cmd := exec.Command("/bin/sh", "-c", s)
		cmd.Env = append(os.Environ(), "D="+p.dir, "R="+strconv.Itoa(i))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			p.kill()
			t.Fatal(err)
		}
		p.cmds = append(p.cmds, cmd)
	}
	return p
}

// kill SIGKILLs the groups of the ranks still running (after a failed test).
func (p *procs) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range p.cmds {
		if !p.exited[i] {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
	}
}

func (p *procs) String() string { return "test attempt" }

func (p *procs) Deliver(ctx context.Context, sig syscall.Signal) error {
	p.mu.Lock()
	select {
	case <-p.delivered:
	default:
		close(p.delivered)
	}
	p.mu.Unlock()
	if p.gate != nil {
		<-p.gate
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range p.cmds {
		if !p.exited[i] {
			_ = c.Process.Signal(sig)
		}
	}
	return nil
}

func (p *procs) Escalate(ctx context.Context, sig syscall.Signal) {
	p.mu.Lock()
	p.escalated = append(p.escalated, sig)
	p.mu.Unlock()
	_ = p.Deliver(ctx, sig)
}

func (p *procs) Finish(ctx context.Context, ranks []plugins.RankResult) supervisor.End {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finishes++
	return p.end
}

// wait reaps rank's shell and reports its end.
func (p *procs) wait(rank int) supervisor.Exit {
	c := p.cmds[rank]
	_ = c.Wait()
	p.mu.Lock()
	p.exited[rank] = true
	p.mu.Unlock()
	res := supervisor.Status(c.ProcessState.Sys().(syscall.WaitStatus))
	ex := supervisor.Exit{Rank: rank, Result: res}
	if p.lostCode != 0 && res.ExitCode == p.lostCode {
		ex.Lost = errors.New("host lost")
	}
	return ex
}

// run starts the supervisor of p's ranks and returns it; the test's cleanup
// kills what is left, joins the supervisor and reaps the orphans.
func (p *procs) run(grace time.Duration) *supervisor.Supervisor {
	s := supervisor.New(supervisor.Config{N: len(p.cmds), Grace: grace, Logger: zaptest.NewLogger(p.t)}, p)
	var wg sync.WaitGroup
	wg.Go(func() { supervisor.RunRanks(s, p.wait) })
	p.t.Cleanup(func() {
		p.kill()
		wg.Wait()
		noChildrenLeft(p.t)
	})
	return s
}

// waitFile polls until $D/name exists.
func (p *procs) waitFile(name string) {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(p.dir, name)); err == nil {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no %s after 10s", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// noChildrenLeft reaps the orphans the shells left and checks that this
// process has no child left, not even a zombie.
func noChildrenLeft(t *testing.T) {
	t.Helper()
	if kids := subreaper.Settle(5 * time.Second); len(kids) > 0 {
		t.Errorf("processes left: %v", kids)
	}
}

func wait(t *testing.T, s *supervisor.Supervisor) plugins.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range res.Ranks {
		res.Ranks[i].PID = 0 // not compared
	}
	return res
}

func TestRunRanks(t *testing.T) {
	const never = "exec sleep 30"
	term1 := plugins.RankResult{Rank: 1, ExitCode: 143, Signal: "SIGTERM", Stopped: true}
	tests := []struct {
		name     string
		scripts  []string
		grace    time.Duration
		lostCode int
		end      supervisor.End
		stopAt   string // Stop (grace 1h) once $D/stopAt exists
		want     plugins.Result
		wantEsc  []syscall.Signal
	}{{
		name:    "every rank exits 0",
		scripts: []string{"exit 0", "exit 0"},
		want:    plugins.Result{FailedRank: -1, Ranks: []plugins.RankResult{{Rank: 0}, {Rank: 1}}},
	}, {
		name:    "the first failure stops the others with SIGTERM",
		scripts: []string{never, "sleep 0.2; exit 3", never},
		want: plugins.Result{ExitCode: 3, FailedRank: 1, Ranks: []plugins.RankResult{
			{Rank: 0, ExitCode: 143, Signal: "SIGTERM", Stopped: true}, {Rank: 1, ExitCode: 3}, {Rank: 2, ExitCode: 143, Signal: "SIGTERM", Stopped: true}}},
		wantEsc: []syscall.Signal{syscall.SIGTERM},
	}, {
		name:    "a rank killed by a signal fails with 128+n",
		scripts: []string{"kill -KILL $$", never},
		want: plugins.Result{ExitCode: 137, FailedRank: 0, Ranks: []plugins.RankResult{
			{Rank: 0, ExitCode: 137, Signal: "SIGKILL"}, term1}},
		wantEsc: []syscall.Signal{syscall.SIGTERM},
	}, {
		name:    "a peer that ignores SIGTERM is killed when the grace is over",
		scripts: []string{`while [ ! -e "$D/ready" ]; do sleep 0.01; done; exit 5`, `trap '' TERM; touch "$D/ready"; exec sleep 30`},
		grace:   200 * time.Millisecond,
		want: plugins.Result{ExitCode: 5, FailedRank: 0, Ranks: []plugins.RankResult{
			{Rank: 0, ExitCode: 5}, {Rank: 1, ExitCode: 137, Signal: "SIGKILL", Stopped: true}}},
		wantEsc: []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL},
	}, {
		name:     "a lost host fails its rank and is named",
		scripts:  []string{"exit 255", never},
		lostCode: 255,
		end:      supervisor.End{LostHosts: []string{"h0"}},
		want: plugins.Result{ExitCode: 255, FailedRank: 0, LostHosts: []string{"h0"}, Ranks: []plugins.RankResult{
			{Rank: 0, ExitCode: 255}, term1}},
		wantEsc: []syscall.Signal{syscall.SIGTERM},
	}, {
		name:     "a host lost during a stop is the failure, not a stopped rank",
		scripts:  []string{`trap 'exit 255' TERM; touch "$D/ready"; while :; do sleep 0.02; done`, never},
		lostCode: 255,
		stopAt:   "ready",
		want: plugins.Result{ExitCode: 255, FailedRank: 0, Stopped: true, Ranks: []plugins.RankResult{
			{Rank: 0, ExitCode: 255}, term1}},
		wantEsc: []syscall.Signal{syscall.SIGTERM},
	}, {
		name:    "Stop: every rank stopped, no failure",
		scripts: []string{never, never},
		stopAt:  ".",
		want:    plugins.Result{FailedRank: -1, Stopped: true, Ranks: []plugins.RankResult{{Rank: 0, ExitCode: 143, Signal: "SIGTERM", Stopped: true}, term1}},
		wantEsc: []syscall.Signal{syscall.SIGTERM},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startProcs(t, tt.scripts...)
			p.lostCode, p.end = tt.lostCode, tt.end
			grace := tt.grace
			if grace == 0 {
				grace = time.Hour
			}
			s := p.run(grace)
			var stop sync.WaitGroup
			if tt.stopAt != "" {
				p.waitFile(tt.stopAt)
				stop.Go(func() {
					if err := s.Stop(context.Background(), time.Hour); err != nil {
						t.Error(err)
					}
				})
			}
			got := wait(t, s)
			stop.Wait()
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Result\n got %+v\nwant %+v", got, tt.want)
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if !slices.Equal(p.escalated, tt.wantEsc) || p.finishes != 1 {
				t.Errorf("escalated %v and finished %d times, want %v and once", p.escalated, p.finishes, tt.wantEsc)
			}
		})
	}
}

func TestStopBringsTheKillForwardAndIsIdempotent(t *testing.T) {
	p := startProcs(t, `trap '' TERM; touch "$D/ready"; exec sleep 30`, "exec sleep 30")
	s := p.run(time.Hour)
	p.waitFile("ready")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// A Stop whose ctx ends returns its error; the stop goes on.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if err := s.Stop(short, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop with a short ctx = %v, want DeadlineExceeded", err)
	}
	if err := s.Signal(ctx, syscall.SIGUSR1); !errors.Is(err, plugins.ErrStopped) {
		t.Errorf("Signal while stopping = %v, want ErrStopped", err)
	}
	begin := time.Now()
	var wg sync.WaitGroup
	for range 3 { // concurrent calls, the shortest grace wins
		wg.Go(func() {
			if err := s.Stop(ctx, 100*time.Millisecond); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("the stop took %v: the shorter grace did not bring the SIGKILL forward", d)
	}
	res := wait(t, s)
	want := plugins.Result{FailedRank: -1, Stopped: true, Ranks: []plugins.RankResult{
		{Rank: 0, ExitCode: 137, Signal: "SIGKILL", Stopped: true}, {Rank: 1, ExitCode: 143, Signal: "SIGTERM", Stopped: true}}}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Result\n got %+v\nwant %+v", res, want)
	}
	if err := s.Stop(ctx, 0); err != nil {
		t.Errorf("Stop after the end = %v", err)
	}
	if err := s.Signal(ctx, syscall.SIGUSR1); !errors.Is(err, plugins.ErrFinished) {
		t.Errorf("Signal after the end = %v, want ErrFinished", err)
	}
}

func TestStopAfterTheEndChangesNothing(t *testing.T) {
	p := startProcs(t, "exit 0")
	s := p.run(time.Hour)
	first := wait(t, s)
	if err := s.Stop(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if again := wait(t, s); !reflect.DeepEqual(first, again) || again.Stopped {
		t.Errorf("Result after a late Stop %+v, before %+v", again, first)
	}
}

func TestSignalReachesTheRanks(t *testing.T) {
	// Each rank says when its trap is set: a signal before it would find
	// the shell's default (death), not the rank's own handling.
	p := startProcs(t, `trap 'exit 7' USR1; touch "$D/ready"; while :; do sleep 0.02; done`, `trap '' USR1; touch "$D/ready1"; exec sleep 30`)
	s := p.run(time.Hour)
	p.waitFile("ready")
	p.waitFile("ready1")
	if err := s.Signal(context.Background(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	want := plugins.Result{ExitCode: 7, FailedRank: 0, Ranks: []plugins.RankResult{
		{Rank: 0, ExitCode: 7}, {Rank: 1, ExitCode: 143, Signal: "SIGTERM", Stopped: true}}}
	if got := wait(t, s); !reflect.DeepEqual(got, want) {
		t.Errorf("Result\n got %+v\nwant %+v", got, want)
	}
}

// A Signal in flight when the ranks end is joined before Finish: a
// launcher's connections stay open under it.
func TestFinishWaitsForSignalsInFlight(t *testing.T) {
	p := startProcs(t, `touch "$D/ready"; exec sleep 30`)
	p.gate = make(chan struct{})
	s := p.run(time.Hour)
	p.waitFile("ready")
	sent := make(chan error, 1)
	go func() { sent <- s.Signal(context.Background(), syscall.SIGTERM) }()
	<-p.delivered
	_ = p.cmds[0].Process.Signal(syscall.SIGKILL) // the rank ends on its own meanwhile
	time.Sleep(100 * time.Millisecond)
	p.mu.Lock()
	finished := p.finishes
	p.mu.Unlock()
	if finished != 0 {
		t.Error("Finish ran while a Signal was in flight")
	}
	select {
	case <-s.Done():
		t.Fatal("the Result was published while a Signal was in flight")
	default:
	}
	close(p.gate)
	if err := <-sent; err != nil {
		t.Error(err)
	}
	if res := wait(t, s); res.FailedRank != 0 || res.ExitCode != 137 {
		t.Errorf("Result %+v, want rank 0 failed by SIGKILL", res)
	}
}

// noRanks is a supervisor.Ranks with nothing to signal, for Run over a
// launcher's own events.
type noRanks struct{ end supervisor.End }

func (noRanks) String() string                                        { return "test attempt" }
func (noRanks) Deliver(ctx context.Context, sig syscall.Signal) error { return nil }
func (noRanks) Escalate(ctx context.Context, sig syscall.Signal)      {}
func (n noRanks) Finish(ctx context.Context, ranks []plugins.RankResult) supervisor.End {
	return n.end
}

// event is a launcher's own event: a rank's end, or a new run.
type event struct {
	restart bool
	exit    supervisor.Exit
}

func TestRunEvents(t *testing.T) {
	exit := func(r, code int) event {
		return event{exit: supervisor.Exit{Rank: r, Result: plugins.RankResult{ExitCode: code}}}
	}
	errLost := errors.New("job vanished")
	tests := []struct {
		name    string
		leave   bool
		end     supervisor.End
		events  []event
		want    plugins.Result
		wantErr bool
	}{{
		name:   "unreported ranks take End.Unreported",
		end:    supervisor.End{Unreported: supervisor.Signaled(syscall.SIGTERM)},
		events: []event{exit(1, 0)},
		want: plugins.Result{ExitCode: 143, FailedRank: 0, Ranks: []plugins.RankResult{
			{Rank: 0, ExitCode: 143, Signal: "SIGTERM"}, {Rank: 1}, {Rank: 2, ExitCode: 143, Signal: "SIGTERM"}}},
	}, {
		name:   "a restart forgets the earlier run; duplicates and strangers are ignored",
		leave:  true,
		events: []event{exit(0, 3), exit(1, 0), {restart: true}, exit(0, 0), exit(0, 9), exit(7, 1), exit(1, 0), exit(2, 0)},
		want:   plugins.Result{FailedRank: -1, Ranks: []plugins.RankResult{{Rank: 0}, {Rank: 1}, {Rank: 2}}},
	}, {
		name:   "while stopping, unreported ranks count as killed",
		events: []event{exit(0, 4)},
		want: plugins.Result{ExitCode: 4, FailedRank: 0, Ranks: []plugins.RankResult{
			{Rank: 0, ExitCode: 4}, {Rank: 1, ExitCode: 137, Signal: "SIGKILL", Stopped: true}, {Rank: 2, ExitCode: 137, Signal: "SIGKILL", Stopped: true}}},
	}, {
		name:   "LeavePeers: peers of a failure are not stopped but count as stopped",
		leave:  true,
		end:    supervisor.End{Err: errLost},
		events: []event{exit(2, 1), exit(0, 143)},
		want: plugins.Result{ExitCode: 1, FailedRank: 2, Ranks: []plugins.RankResult{
			{Rank: 0, ExitCode: 143, Stopped: true}, {Rank: 1, ExitCode: 137, Signal: "SIGKILL", Stopped: true}, {Rank: 2, ExitCode: 1}}},
		wantErr: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := supervisor.Config{N: 3, Grace: time.Hour, LeavePeers: tt.leave, Logger: zaptest.NewLogger(t)}
			s := supervisor.New(cfg, noRanks{end: tt.end})
			events := make(chan event)
			go supervisor.Run(s, events, func(tl *supervisor.Tally, e event) {
				if e.restart {
					tl.Restart()
					return
				}
				tl.Exit(e.exit)
			})
			for _, e := range tt.events {
				events <- e
			}
			close(events)
			res, err := s.Wait(context.Background())
			if !reflect.DeepEqual(res, tt.want) {
				t.Errorf("Result\n got %+v\nwant %+v", res, tt.want)
			}
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, errLost)) {
				t.Errorf("error %v, want one: %v", err, tt.wantErr)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	tests := []struct {
		ws   syscall.WaitStatus
		want plugins.RankResult
	}{
		{0x0000, plugins.RankResult{}},
		{0x0300, plugins.RankResult{ExitCode: 3}},
		{0x000f, plugins.RankResult{ExitCode: 143, Signal: "SIGTERM"}},
		{0x0089, plugins.RankResult{ExitCode: 137, Signal: "SIGKILL"}}, // core dumped
		{0x137f, plugins.RankResult{ExitCode: -1}},                     // stopped
	}
	for _, tt := range tests {
		if got := supervisor.Status(tt.ws); got != tt.want {
			t.Errorf("Status(%#x) = %+v, want %+v", uint32(tt.ws), got, tt.want)
		}
	}
}
