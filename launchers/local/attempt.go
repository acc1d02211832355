package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/plugins"
)

const (
	// groupGoneTimeout bounds the wait for a SIGKILLed group to die (a
	// process in uninterruptible sleep can take a while).
	groupGoneTimeout = 10 * time.Second
	// outputDrainTimeout bounds reading output after the group is gone: a
	// process that left the group may still hold a pipe open.
	outputDrainTimeout = 2 * time.Second
)

// rankProc is one started process of an attempt.
type rankProc struct {
	rank   int
	cmd    *exec.Cmd
	pid    int
	stdout *os.File // read ends; nil when the spec has no Output
	stderr *os.File
}

// rankExit is what a rank's waiter saw: the wait status of the (still
// unreaped) process.
type rankExit struct {
	rank   int
	status unix.WaitStatus
	err    error
}

func (e rankExit) failed() bool {
	return e.err != nil || !e.status.Exited() || e.status.ExitStatus() != 0
}

// attempt is a started attempt; it implements plugins.Handle.
type attempt struct {
	l      *Launcher
	spec   plugins.AttemptSpec
	port   int
	logger *zap.Logger
	ranks  []*rankProc
	pgid   int

	stops *plugins.StopRequests // Stop calls, for the supervisor
	done  chan struct{}         // closed when result is final

	mu       sync.Mutex
	stopping bool // SIGTERM has been sent to the group
	finished bool // ranks are being reaped: the group id is no longer ours
	result   plugins.Result
}

var _ plugins.Handle = (*attempt)(nil)

func newAttempt(l *Launcher, spec plugins.AttemptSpec, port int) *attempt {
	return &attempt{
		l:      l,
		spec:   spec,
		port:   port,
		logger: l.logger.With(zap.String("job", spec.JobID), zap.Int("attempt", spec.Attempt)),
		stops:  plugins.NewStopRequests(),
		done:   make(chan struct{}),
	}
}

// start starts every process of the attempt, in one process group. On
// failure it kills and reaps what it started.
func (a *attempt) start(ctx context.Context) error {
	spec := a.spec
	mode := plugins.ResolveMode(spec.Mode, spec.Command)
	n := spec.Config.Workers
	if mode == plugins.ModeSelf {
		n = 1
	}
	argv := plugins.ExpandCommand(spec.Command, spec.Config)
	base := plugins.InheritEnv(os.Environ())
	for r := 0; r < n; r++ {
		if err := ctx.Err(); err != nil {
			a.abort()
			return fmt.Errorf("start rank %d of job %s attempt %d: %w", r, spec.JobID, spec.Attempt, err)
		}
		if err := a.startRank(r, n, argv, base); err != nil {
			a.abort()
			return fmt.Errorf("start rank %d of job %s attempt %d: %w", r, spec.JobID, spec.Attempt, err)
		}
	}
	if a.l.opts.Reaper != nil {
		pids := make([]int, len(a.ranks))
		for i, rp := range a.ranks {
			pids[i] = rp.pid
		}
		a.l.opts.Reaper.register(a.pgid, pids)
	}
	a.logger = a.logger.With(zap.Int("pgid", a.pgid))
	a.logger.Info("attempt started", zap.String("mode", string(mode)), zap.Int("processes", n),
		zap.Strings("command", argv), zap.Int("master_port", a.port))
	return nil
}

func (a *attempt) startRank(r, n int, argv, base []string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = a.spec.Dir
	cmd.Env = append(slices.Clip(base), plugins.WorkerEnv(a.spec, r, r, n, a.l.opts.MasterAddr, a.port)...)
	// The first rank leads a new group (Pgid 0); the others join it. The
	// leader stays unreaped until cleanup, so its group outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: a.pgid}
	if a.l.opts.KillOnParentDeath {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	rp := &rankProc{rank: r, cmd: cmd}
	var writers []*os.File
	if a.spec.Output != nil {
		for _, dst := range []*(*os.File){&rp.stdout, &rp.stderr} {
			rd, wr, err := os.Pipe()
			if err != nil {
				closeAll(rp.stdout, rp.stderr)
				closeAll(writers...)
				return fmt.Errorf("output pipe: %w", err)
			}
			*dst = rd
			writers = append(writers, wr)
		}
		cmd.Stdout, cmd.Stderr = writers[0], writers[1]
	}
	err := cmd.Start()
	closeAll(writers...) // the child has its copies
	if err != nil {
		closeAll(rp.stdout, rp.stderr)
		return err
	}
	rp.pid = cmd.Process.Pid
	if r == 0 {
		a.pgid = rp.pid
	}
	a.ranks = append(a.ranks, rp)
	return nil
}

// abort kills and reaps the processes started so far.
func (a *attempt) abort() {
	if a.pgid > 0 {
		_ = unix.Kill(-a.pgid, unix.SIGKILL)
	}
	for _, rp := range a.ranks {
		_ = rp.cmd.Wait()
		closeAll(rp.stdout, rp.stderr)
	}
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			_ = f.Close()
		}
	}
}

// ID returns the attempt's process-group id in decimal.
func (a *attempt) ID() string { return strconv.Itoa(a.pgid) }

// Wait blocks until the attempt has finished and returns its Result; every
// call gets the same Result. It returns ctx's error if ctx ends first.
func (a *attempt) Wait(ctx context.Context) (plugins.Result, error) {
	select {
	case <-a.done:
		r := a.result
		r.Ranks = slices.Clone(r.Ranks)
		return r, nil
	case <-ctx.Done():
		return plugins.Result{}, fmt.Errorf("wait for job %s attempt %d: %w", a.spec.JobID, a.spec.Attempt, ctx.Err())
	}
}

// Signal sends sig to the attempt's process group. It fails with
// plugins.ErrStopped once the attempt is being stopped and with
// plugins.ErrFinished once its processes have ended.
func (a *attempt) Signal(ctx context.Context, sig syscall.Signal) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.finished:
		return fmt.Errorf("signal %s to job %s attempt %d: %w", unix.SignalName(sig), a.spec.JobID, a.spec.Attempt, plugins.ErrFinished)
	case a.stopping:
		return fmt.Errorf("signal %s to job %s attempt %d: %w", unix.SignalName(sig), a.spec.JobID, a.spec.Attempt, plugins.ErrStopped)
	}
	if err := unix.Kill(-a.pgid, sig); err != nil {
		return fmt.Errorf("signal %s to job %s attempt %d: %w", unix.SignalName(sig), a.spec.JobID, a.spec.Attempt, err)
	}
	return nil
}

// Stop sends SIGTERM to the attempt's process group, SIGKILL when grace has
// passed (at once for grace <= 0), and returns when every process is gone.
// A later call with a shorter grace brings the SIGKILL forward. If ctx ends
// first Stop returns its error and the stop goes on. Stopping a finished
// attempt does nothing; its Result keeps Stopped false.
func (a *attempt) Stop(ctx context.Context, grace time.Duration) error {
	if err := a.stops.Stop(ctx, grace, a.done); err != nil {
		return fmt.Errorf("stop job %s attempt %d: %w", a.spec.JobID, a.spec.Attempt, err)
	}
	return nil
}

// signalGroup sends sig to the process group unless cleanup has begun.
func (a *attempt) signalGroup(sig unix.Signal) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.finished {
		return
	}
	if err := unix.Kill(-a.pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		a.logger.Warn("signal group", zap.String("signal", unix.SignalName(sig)), zap.Error(err))
	}
}

// supervise owns the attempt's goroutines: it runs the attempt to its end,
// cleans up, joins everything it started and publishes the result.
func (a *attempt) supervise() {
	defer close(a.done)
	n := len(a.ranks)
	exits := make(chan rankExit, n)
	var waiters, readers sync.WaitGroup
	for _, rp := range a.ranks {
		waiters.Go(func() { exits <- waitExit(rp) })
		if a.spec.Output != nil {
			for _, s := range []struct {
				f      *os.File
				stream plugins.Stream
			}{{rp.stdout, plugins.Stdout}, {rp.stderr, plugins.Stderr}} {
				readers.Go(func() { a.readOutput(rp.rank, s.stream, s.f) })
			}
		}
	}

	var (
		running    = n
		failedRank = -1
		stopped    = make([]bool, n)
		early      = make([]rankExit, n)
		stopByCall = false
		esc        plugins.Escalation
	)
	defer esc.Close()
	beginStop := func(deadline time.Time) {
		if esc.Begin(deadline) {
			a.mu.Lock()
			a.stopping = true
			a.mu.Unlock()
			a.signalGroup(unix.SIGTERM)
		}
	}
	for running > 0 {
		select {
		case ex := <-exits:
			running--
			early[ex.rank] = ex
			a.logger.Debug("rank exited", zap.Int("rank", ex.rank), zap.Stringer("status", waitStatusString(ex.status)), zap.Error(ex.err))
			switch {
			case esc.Stopping():
				stopped[ex.rank] = true
			case ex.failed():
				failedRank = ex.rank
				if running > 0 {
					a.logger.Warn("rank failed; stopping the others", zap.Int("rank", ex.rank),
						zap.Stringer("status", waitStatusString(ex.status)), zap.Duration("grace", a.l.opts.Grace))
					beginStop(time.Now().Add(a.l.opts.Grace))
				}
			}
		case <-a.stops.C():
			deadline := a.stops.Deadline()
			if !stopByCall {
				stopByCall = true
				a.logger.Info("stopping attempt", zap.Duration("grace", time.Until(deadline).Round(time.Millisecond)))
			}
			beginStop(deadline)
		case <-esc.Due():
			esc.Fired()
			a.logger.Warn("grace over; killing the group")
			a.signalGroup(unix.SIGKILL)
		}
	}

	ranks := a.cleanup(early, stopped)
	readers.Wait()
	waiters.Wait()
	for _, rp := range a.ranks {
		closeAll(rp.stdout, rp.stderr)
	}

	res := plugins.Result{FailedRank: failedRank, Stopped: stopByCall, Ranks: ranks}
	if failedRank >= 0 {
		res.ExitCode = ranks[failedRank].ExitCode
	}
	a.mu.Lock()
	a.result = res
	a.mu.Unlock()
	a.logger.Info("attempt finished", zap.Int("exit_code", res.ExitCode), zap.Int("failed_rank", res.FailedRank), zap.Bool("stopped", res.Stopped))
}

// cleanup runs once every rank has exited: it kills what is left of the
// group, waits for it to die, reaps the ranks and, with a Reaper, their
// orphans; then it bounds the output readers with a deadline. It returns
// each rank's result.
func (a *attempt) cleanup(early []rankExit, stopped []bool) []plugins.RankResult {
	a.signalGroup(unix.SIGKILL)
	a.awaitGroup(true)

	a.mu.Lock()
	a.finished = true
	a.mu.Unlock()
	ranks := make([]plugins.RankResult, len(a.ranks))
	for i, rp := range a.ranks {
		ws := early[i].status
		if err := rp.cmd.Wait(); rp.cmd.ProcessState != nil {
			ws = unix.WaitStatus(rp.cmd.ProcessState.Sys().(syscall.WaitStatus))
		} else if err != nil {
			a.logger.Warn("reap rank", zap.Int("rank", i), zap.Error(err))
		}
		ranks[i] = rankResult(rp, ws, stopped[i])
	}
	if r := a.l.opts.Reaper; r != nil {
		a.awaitGroup(false)
		r.unregister(a.pgid)
	}

	drain := time.Now().Add(outputDrainTimeout)
	for _, rp := range a.ranks {
		for _, f := range []*os.File{rp.stdout, rp.stderr} {
			if f != nil {
				_ = f.SetReadDeadline(drain)
			}
		}
	}
	return ranks
}

// awaitGroup polls until the process group has no live member or, when
// zombiesOK is false, no member at all, reaping orphans with the Reaper when
// there is one. It gives up after groupGoneTimeout.
func (a *attempt) awaitGroup(zombiesOK bool) {
	deadline := time.Now().Add(groupGoneTimeout)
	delay := time.Millisecond
	for {
		if r := a.l.opts.Reaper; r != nil {
			r.reapGroup(a.pgid)
		}
		members, err := groupMembers(a.pgid)
		if err != nil {
			a.logger.Warn("await group", zap.Error(err))
			return
		}
		var left []int
		for _, m := range members {
			if !zombiesOK || m.state != 'Z' {
				left = append(left, m.pid)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			a.logger.Warn("processes of the attempt outlived it", zap.Ints("pids", left))
			return
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// waitExit blocks until rp's process has exited, without reaping it
// (WNOWAIT), and returns its wait status.
func waitExit(rp *rankProc) rankExit {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, rp.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return rankExit{rank: rp.rank, err: fmt.Errorf("wait for rank %d (pid %d): %w", rp.rank, rp.pid, err)}
		}
		return rankExit{rank: rp.rank, status: sigchldStatus(&info)}
	}
}

// si_code values of SIGCHLD (not in x/sys/unix).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// sigchldStatus turns the siginfo that waitid(2) fills into a wait(2)
// status. x/sys/unix keeps the union of siginfo_t opaque; for SIGCHLD it
// holds si_pid, si_uid and si_status, the union starting at the first
// pointer-aligned offset after the three int32 header fields.
func sigchldStatus(info *unix.Siginfo) unix.WaitStatus {
	ptr := unsafe.Sizeof(uintptr(0))
	union := (3*4 + ptr - 1) &^ (ptr - 1)
	status := *(*int32)(unsafe.Add(unsafe.Pointer(info), union+8))
	switch info.Code {
	case cldExited:
		return unix.WaitStatus(status&0xff) << 8
	case cldKilled:
		return unix.WaitStatus(status & 0x7f)
	case cldDumped:
		return unix.WaitStatus(status&0x7f | 0x80)
	default: // stopped or continued cannot be reported without WSTOPPED/WCONTINUED
		return unix.WaitStatus(0xff) << 8
	}
}

// readOutput delivers the lines of one output stream of one rank.
func (a *attempt) readOutput(rank int, stream plugins.Stream, f *os.File) {
	err := readLines(f, a.l.opts.MaxLineBytes, func(line string) { a.spec.Output(rank, stream, line) })
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
		a.logger.Warn("output still open after the attempt ended; a process left its group",
			zap.Int("rank", rank), zap.String("stream", string(stream)))
	default:
		a.logger.Warn("read output", zap.Int("rank", rank), zap.String("stream", string(stream)), zap.Error(err))
	}
}

func rankResult(rp *rankProc, ws unix.WaitStatus, stopped bool) plugins.RankResult {
	rr := plugins.RankResult{Rank: rp.rank, PID: rp.pid, Stopped: stopped}
	switch {
	case ws.Signaled():
		rr.ExitCode = 128 + int(ws.Signal())
		rr.Signal = unix.SignalName(ws.Signal())
	case ws.Exited():
		rr.ExitCode = ws.ExitStatus()
	default:
		rr.ExitCode = -1
	}
	return rr
}

type waitStatusString unix.WaitStatus

func (w waitStatusString) String() string {
	ws := unix.WaitStatus(w)
	if ws.Signaled() {
		return "signal " + unix.SignalName(ws.Signal())
	}
	return "exit " + strconv.Itoa(ws.ExitStatus())
}
