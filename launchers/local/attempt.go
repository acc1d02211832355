package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/internal/userfs"
	"github.com/scavenger-ml/scavenger/launchers/supervisor"
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

// attempt is a started attempt; it implements plugins.Handle with its
// Supervisor and supervisor.Ranks with a process group.
type attempt struct {
	*supervisor.Supervisor
	l      *Launcher
	spec   plugins.AttemptSpec
	port   int
	logger *zap.Logger
	ranks  []*rankProc
	pgid   int
	// cg holds every process of the attempt (cgroup.go); nil without cgroup v2.
	cg      *attemptCgroup
	readers sync.WaitGroup // output readers, joined by Finish
}

var (
	_ plugins.Handle   = (*attempt)(nil)
	_ supervisor.Ranks = (*attempt)(nil)
)

func newAttempt(l *Launcher, spec plugins.AttemptSpec, port int) *attempt {
	return &attempt{
		l:      l,
		spec:   spec,
		port:   port,
		logger: l.logger.With(zap.String("job", spec.JobID), zap.Int("attempt", spec.Attempt)),
	}
}

// program is the file the command name runs: for another user's job, looked
// up in the PATH of the worker's environment (env), as that user, so that
// the daemon's own PATH (root's) chooses nothing for them; a name with a
// slash, or the daemon's own job's, as os/exec does.
func (a *attempt) program(name string, env []string) (string, error) {
	u := a.spec.User
	if u == nil || strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v // the last one is the one the worker sees
		}
	}
	p, err := userfs.LookPath(&userfs.ID{UID: u.UID, GID: u.GID, Groups: u.Groups}, name, path)
	if err != nil {
		return "", fmt.Errorf("as %s: %w", u.Name, err)
	}
	return p, nil
}

// userBaseEnv is the environment a job of another user starts from, under
// the one its owner sent.
var userBaseEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

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
	if spec.User != nil {
		base = userBaseEnv // not the daemon's environment: another user's job gets its own (spec.Env)
	}
	cg, err := newAttemptCgroup(spec.JobID, spec.Attempt)
	if err != nil {
		a.logger.Warn("no cgroup for the attempt: a worker's child that leaves its process group (setsid) may outlive it", zap.Error(err))
	}
	a.cg = cg
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
		a.l.opts.Reaper.register(a.pgid, pids, a.cg)
	}
	a.logger = a.logger.With(zap.Int("pgid", a.pgid))
	a.Supervisor = supervisor.New(supervisor.Config{N: n, Grace: a.l.opts.Grace, Logger: a.logger}, a)
	a.logger.Info("attempt started", zap.String("mode", string(mode)), zap.Int("processes", n),
		zap.Strings("command", argv), zap.Int("master_port", a.port))
	return nil
}

func (a *attempt) startRank(r, n int, argv, base []string) error {
	env := append(slices.Clip(base), plugins.WorkerEnv(a.spec, r, r, n, a.l.opts.MasterAddr, a.port)...)
	prog, err := a.program(argv[0], env)
	if err != nil {
		return err
	}
	cmd := exec.Command(prog, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Dir = a.spec.Dir
	cmd.Env = env
	// The first rank leads a new group (Pgid 0); the others join it. The
	// leader stays unreaped until cleanup, so its group outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: a.pgid}
	if u := a.spec.User; u != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
	}
	if a.cg != nil {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, a.cg.fd
	}
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
	err = cmd.Start()
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
	if a.cg != nil {
		a.cg.kill()
	}
	for _, rp := range a.ranks {
		_ = rp.cmd.Wait()
		closeAll(rp.stdout, rp.stderr)
	}
	a.removeCgroup()
}

// removeCgroup removes the attempt's cgroup, once nothing lives in it.
func (a *attempt) removeCgroup() {
	if a.cg == nil {
		return
	}
	if err := a.cg.remove(); err != nil {
		a.logger.Warn("remove the attempt's cgroup", zap.Error(err))
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

// String names the attempt in errors.
func (a *attempt) String() string {
	return fmt.Sprintf("job %s attempt %d", a.spec.JobID, a.spec.Attempt)
}

// Deliver sends sig to the attempt's process group.
func (a *attempt) Deliver(ctx context.Context, sig syscall.Signal) error {
	return unix.Kill(-a.pgid, sig)
}

// Escalate sends a stop's sig to the process group and to the processes
// of the attempt's cgroup that left the group: each process gets it once.
func (a *attempt) Escalate(ctx context.Context, sig syscall.Signal) {
	a.signalGroup(sig)
	switch {
	case a.cg == nil:
	case sig == syscall.SIGKILL:
		a.cg.kill()
	default:
		a.cg.signal(sig, a.pgid)
	}
}

// signalGroup sends sig to the process group, logging a failure.
func (a *attempt) signalGroup(sig unix.Signal) {
	if err := unix.Kill(-a.pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		a.logger.Warn("signal group", zap.String("signal", unix.SignalName(sig)), zap.Error(err))
	}
}

// supervise starts the output readers and runs the attempt to its end.
func (a *attempt) supervise() {
	if a.spec.Output != nil {
		for _, rp := range a.ranks {
			a.readers.Go(func() { a.readOutput(rp.rank, plugins.Stdout, rp.stdout) })
			a.readers.Go(func() { a.readOutput(rp.rank, plugins.Stderr, rp.stderr) })
		}
	}
	supervisor.RunRanks(a.Supervisor, a.waitRank)
}

// waitRank waits for rank's process to exit, leaving it unreaped.
func (a *attempt) waitRank(rank int) supervisor.Exit {
	rp := a.ranks[rank]
	ws, err := waitExit(rp)
	res := supervisor.Status(syscall.WaitStatus(ws))
	if err != nil {
		a.logger.Warn("wait for rank", zap.Int("rank", rank), zap.Error(err))
		res = plugins.RankResult{ExitCode: -1}
	}
	res.PID = rp.pid
	return supervisor.Exit{Rank: rank, Result: res}
}

// Finish runs once every rank has exited: it kills what is left of the
// group, waits for it to die, reaps the ranks (taking their exit from the
// reaped status) and, with a Reaper, their orphans; then it gives the
// output readers a deadline and joins them.
func (a *attempt) Finish(ctx context.Context, ranks []plugins.RankResult) supervisor.End {
	a.signalGroup(unix.SIGKILL)
	if a.cg != nil {
		a.cg.kill()
	}
	a.awaitGroup(true)
	for i, rp := range a.ranks {
		if err := rp.cmd.Wait(); rp.cmd.ProcessState != nil {
			r := supervisor.Status(rp.cmd.ProcessState.Sys().(syscall.WaitStatus))
			ranks[i].ExitCode, ranks[i].Signal = r.ExitCode, r.Signal
		} else if err != nil {
			a.logger.Warn("reap rank", zap.Int("rank", i), zap.Error(err))
		}
	}
	if r := a.l.opts.Reaper; r != nil {
		a.awaitGroup(false)
		r.unregister(a.pgid)
	}
	a.removeCgroup()
	drain := time.Now().Add(outputDrainTimeout)
	for _, rp := range a.ranks {
		for _, f := range []*os.File{rp.stdout, rp.stderr} {
			if f != nil {
				_ = f.SetReadDeadline(drain)
			}
		}
	}
	a.readers.Wait()
	for _, rp := range a.ranks {
		closeAll(rp.stdout, rp.stderr)
	}
	return supervisor.End{}
}

// awaitGroup polls until the process group and the cgroup have no live
// member or, when zombiesOK is false (with a Reaper), no member at all,
// reaping orphans with the Reaper when there is one. It polls after 1 ms, doubling to 50 ms, and gives up after
// groupGoneTimeout.
func (a *attempt) awaitGroup(zombiesOK bool) {
	var left []int
	_, err := backoff.Retry(context.Background(), func() (struct{}, error) {
		if r := a.l.opts.Reaper; r != nil {
			r.reapGroup(a.pgid)
		}
		members, err := groupMembers(a.pgid)
		if err != nil {
			return struct{}{}, backoff.Permanent(err)
		}
		left = left[:0]
		for _, m := range members {
			if !zombiesOK || m.State != 'Z' {
				left = append(left, m.PID)
			}
		}
		switch {
		case a.cg == nil:
		case zombiesOK && a.cg.populated():
			left = append(left, a.cg.pids()...)
		case !zombiesOK:
			left = append(left, a.l.opts.Reaper.zombiesIn(a.cg)...)
		}
		if len(left) > 0 {
			return struct{}{}, errGroupLeft
		}
		return struct{}{}, nil
	}, backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: time.Millisecond, Multiplier: 2, MaxInterval: 50 * time.Millisecond}),
		backoff.WithMaxElapsedTime(groupGoneTimeout))
	switch {
	case errors.Is(err, errGroupLeft):
		a.logger.Warn("processes of the attempt outlived it", zap.Ints("pids", left))
	case err != nil:
		a.logger.Warn("await group", zap.Error(err))
	}
}

// errGroupLeft: members of the group are left (awaitGroup polls again).
var errGroupLeft = errors.New("process group not gone yet")

// waitExit blocks until rp's process has exited, without reaping it
// (WNOWAIT), and returns its wait status.
func waitExit(rp *rankProc) (unix.WaitStatus, error) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, rp.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("wait for rank %d (pid %d): %w", rp.rank, rp.pid, err)
		}
		return sigchldStatus(&info), nil
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
