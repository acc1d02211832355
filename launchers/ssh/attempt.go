package ssh

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/launchers/lineio"
	"github.com/scavenger-ml/scavenger/launchers/supervisor"
	"github.com/scavenger-ml/scavenger/plugins"
)

const (
	// killTimeout bounds one remote kill exec.
	killTimeout = 10 * time.Second
	// outputDrainTimeout bounds reading output after every rank has ended.
	outputDrainTimeout = 2 * time.Second
	// pgidGraceOnCancel is how long a cancelled Start still waits for a
	// started rank to report its process group, so that it can be killed.
	pgidGraceOnCancel = 2 * time.Second
	// lostExitCode is the exit code of a rank whose host was lost (ssh's own).
	lostExitCode = 255
)

// conn is the attempt's connection to one host.
type conn struct {
	idx    int // in Options.Hosts
	host   Host
	client *gossh.Client
	done   chan struct{} // closed to end the keepalive loop
	fwd    *forwarder    // nil when telemetry is not forwarded

	mu   sync.Mutex
	lost error // set when the host stopped answering
}

func (c *conn) lostErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

// setLost records the first reason the host was lost and returns the one recorded.
func (c *conn) setLost(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost == nil {
		c.lost = err
	}
	return c.lost
}

// socket is SCAV_SOCKET for the workers on c's host.
func (c *conn) socket(spec plugins.AttemptSpec) string {
	if c.fwd != nil {
		return c.fwd.path
	}
	return spec.Socket
}

// rankProc is one remote process of an attempt.
type rankProc struct {
	rank   int
	conn   *conn
	sess   *gossh.Session
	pgid   int
	stdout *bufio.Reader
	stderr io.Reader
}

// attempt is a started attempt; it implements plugins.Handle with its
// Supervisor and supervisor.Ranks with SSH sessions.
type attempt struct {
	*supervisor.Supervisor
	l      *Launcher
	spec   plugins.AttemptSpec
	places []placement
	logger *zap.Logger
	conns  map[int]*conn // by host index
	ranks  []*rankProc
	port   int

	kaWG    sync.WaitGroup // keepalive loops
	readers sync.WaitGroup // output readers, joined by Finish

	mu     sync.Mutex
	exited []bool // the ranks whose session has ended
}

var (
	_ plugins.Handle   = (*attempt)(nil)
	_ supervisor.Ranks = (*attempt)(nil)
)

func newAttempt(l *Launcher, spec plugins.AttemptSpec, places []placement) *attempt {
	return &attempt{
		l:      l,
		spec:   spec,
		places: places,
		logger: l.logger.With(zap.String("job", spec.JobID), zap.Int("attempt", spec.Attempt)),
		conns:  map[int]*conn{},
		exited: make([]bool, len(places)),
	}
}

// start connects to the hosts and starts every rank. On failure it kills
// what it started and closes the connections.
func (a *attempt) start(ctx context.Context) error {
	kaLog := a.logger // a.logger is replaced below; the loops keep this one
	if err := a.connect(ctx, kaLog); err != nil {
		return err
	}
	first := a.conns[a.places[0].host]
	a.port = a.l.opts.MasterPort
	if a.port == 0 {
		p, err := freeRemotePort(first.client)
		if err != nil {
			a.abort()
			return fmt.Errorf("host %s: %w", first.host.Addr, err)
		}
		a.port = p
	}
	argv := plugins.ExpandCommand(a.spec.Command, a.spec.Config)
	for r, p := range a.places {
		if err := ctx.Err(); err != nil {
			a.abort()
			return fmt.Errorf("start rank %d: %w", r, err)
		}
		spec := a.spec
		spec.Socket = a.conns[p.host].socket(a.spec)
		env := plugins.WorkerEnv(spec, r, p.localRank, p.localWorld, first.host.Addr, a.port)
		if sig := a.l.opts.PreemptSignal; sig != "" {
			env = append(env, plugins.EnvPreemptSignal+"="+sig)
		}
		cmd := remoteCommand(a.spec.Dir, env, argv)
		if a.l.opts.Detach {
			cmd = detachedCommand(a.spec.Dir, env, argv, attemptDir(a.spec.JobID, a.spec.Attempt), r)
		}
		rp, err := a.startRank(ctx, r, a.conns[p.host], cmd)
		if rp != nil {
			a.ranks = append(a.ranks, rp)
		}
		if err != nil {
			a.abort()
			return fmt.Errorf("start rank %d on %s: %w", r, a.conns[p.host].host.Addr, err)
		}
	}
	a.logger = a.logger.With(zap.String("id", a.ID()))
	a.Supervisor = supervisor.New(supervisor.Config{N: len(a.ranks), Grace: a.l.opts.Grace, Logger: a.logger}, a)
	a.logger.Info("attempt started", zap.Int("processes", len(a.places)), zap.Strings("command", argv),
		zap.String("master_addr", first.host.Addr), zap.Int("master_port", a.port))
	return nil
}

// connect connects to every host the attempt uses, in parallel, with a
// keepalive loop each, and starts the telemetry forwards. On failure it
// closes what it opened.
func (a *attempt) connect(ctx context.Context, kaLog *zap.Logger) error {
	var hostIdx []int
	for _, p := range a.places {
		if !slices.Contains(hostIdx, p.host) {
			hostIdx = append(hostIdx, p.host)
		}
	}
	clients := make([]*gossh.Client, len(hostIdx))
	errs := make([]error, len(hostIdx))
	var wg sync.WaitGroup
	for i, hi := range hostIdx {
		wg.Go(func() { clients[i], errs[i] = a.l.dial(ctx, a.l.opts.Hosts[hi]) })
	}
	wg.Wait()
	for i, hi := range hostIdx {
		if clients[i] != nil {
			c := &conn{idx: hi, host: a.l.opts.Hosts[hi], client: clients[i], done: make(chan struct{})}
			a.conns[hi] = c
			a.kaWG.Go(func() { a.keepalive(c, kaLog) })
		}
		if errors.Is(errs[i], ErrHostUnreachable) && ctx.Err() == nil {
			a.l.markLost(hi, errs[i], nil, nil) // Start returns the error
		}
	}
	if err := errors.Join(errs...); err != nil {
		a.abort()
		return err
	}
	if !a.l.opts.NoTelemetryForward && a.spec.Socket != "" {
		errs := make([]error, len(hostIdx))
		for i, hi := range hostIdx {
			c := a.conns[hi]
			wg.Go(func() {
				c.fwd, errs[i] = a.forwarder(c, hi, kaLog)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			a.abort()
			return err
		}
	}

	return nil
}

// forwarder starts the telemetry forward of the attempt to host hi over c:
// in a directory known in advance for a detached attempt.
func (a *attempt) forwarder(c *conn, hi int, log *zap.Logger) (*forwarder, error) {
	if a.l.opts.Detach {
		return detachedForwarder(c.client, a.l.names[hi], a.spec.Socket, a.spec.JobID, a.spec.Attempt, log)
	}
	return startForwarder(c.client, a.l.names[hi], a.spec.Socket, a.spec.JobID, a.spec.Attempt, log)
}

// startRank opens a session, starts cmd and reads the pgid line. It
// returns the process (for abort) whenever the session was started.
func (a *attempt) startRank(ctx context.Context, r int, c *conn, cmd string) (*rankProc, error) {
	sess, err := c.client.NewSession()
	if err != nil {
		return nil, fmt.Errorf("new session: %w", err)
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		_ = sess.Close()
		return nil, err
	}
	var stderr io.Reader
	if a.spec.Output != nil {
		if stderr, err = sess.StderrPipe(); err != nil {
			_ = sess.Close()
			return nil, err
		}
	}
	if err := sess.Start(cmd); err != nil {
		_ = sess.Close()
		return nil, fmt.Errorf("exec: %w", err)
	}
	rp := &rankProc{rank: r, conn: c, sess: sess, stdout: bufio.NewReaderSize(stdout, 4096), stderr: stderr}
	type got struct {
		line string
		err  error
	}
	ch := make(chan got, 1)
	go func() {
		line, err := rp.stdout.ReadString('\n')
		ch <- got{line, err}
	}()
	parse := func(g got) (*rankProc, error) {
		s, ok := strings.CutPrefix(strings.TrimSpace(g.line), strings.TrimSpace(pgidMarker))
		pgid, perr := strconv.Atoi(strings.TrimSpace(s))
		if g.err != nil || !ok || perr != nil || pgid <= 1 {
			_ = sess.Close()
			return nil, fmt.Errorf("remote wrapper did not report its process group (got %q): %v", g.line, g.err)
		}
		rp.pgid = pgid
		return rp, nil
	}
	select {
	case g := <-ch:
		return parse(g)
	case <-ctx.Done():
		// The process may have started: give it a moment to report its
		// group so that abort can kill it (closing a session without a PTY
		// leaves its command running).
		select {
		case g := <-ch:
			if rp, err := parse(g); err == nil {
				return rp, ctx.Err()
			}
		case <-time.After(pgidGraceOnCancel):
			_ = sess.Close()
		}
		return nil, ctx.Err()
	}
}

// abort kills the groups started so far and closes every connection.
func (a *attempt) abort() {
	a.killAll(unix.SIGKILL, false)
	for _, rp := range a.ranks {
		_ = rp.sess.Close()
	}
	a.closeForwarders(0)
	a.closeConns()
	a.recordLost()
}

// recordLost tells the launcher which hosts the attempt lost, with the
// process groups left on each, and returns their names in inventory order.
func (a *attempt) recordLost() []string {
	var idx []int
	for hi, c := range a.conns {
		if c.lostErr() != nil {
			idx = append(idx, hi)
		}
	}
	slices.Sort(idx)
	var names []string
	for _, hi := range idx {
		c := a.conns[hi]
		var orphans []orphan
		for _, rp := range a.ranks {
			if rp.conn == c {
				orphans = append(orphans, orphan{job: a.spec.JobID, attempt: a.spec.Attempt, pgid: rp.pgid})
			}
		}
		var dirs []string
		if c.fwd != nil {
			dirs = append(dirs, c.fwd.dir)
		}
		a.l.markLost(hi, c.lostErr(), orphans, dirs)
		names = append(names, a.l.names[hi])
	}
	return names
}

// closeForwarders closes every host's telemetry forward, in parallel,
// giving open connections up to drain to end.
func (a *attempt) closeForwarders(drain time.Duration) {
	var wg sync.WaitGroup
	for _, c := range a.conns {
		if c.fwd != nil {
			wg.Go(func() { c.fwd.close(drain, c.lostErr() != nil) })
		}
	}
	wg.Wait()
}

func (a *attempt) closeConns() {
	for _, c := range a.conns {
		close(c.done)
		_ = c.client.Close()
	}
	a.kaWG.Wait()
}

// keepalive sends OpenSSH keepalives until c.done is closed; a host that
// does not answer in time is marked lost and its connection closed, which
// ends its sessions.
func (a *attempt) keepalive(c *conn, logger *zap.Logger) {
	t := time.NewTicker(a.l.opts.KeepaliveInterval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		reply := make(chan error, 1)
		go func() {
			_, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil)
			reply <- err
		}()
		var err error
		select {
		case <-c.done:
			return
		case err = <-reply:
		case <-time.After(a.l.opts.KeepaliveTimeout):
			err = fmt.Errorf("no keepalive answer within %v", a.l.opts.KeepaliveTimeout)
		}
		if err != nil {
			c.setLost(fmt.Errorf("host %s: %w: %w", c.host.dialAddr(), ErrHostUnreachable, err))
			logger.Error("host lost", zap.String("host", c.host.dialAddr()), zap.Error(err))
			_ = c.client.Close()
			return
		}
	}
}

// ID is "<addr>:<pgid>" of rank 0.
func (a *attempt) ID() string {
	if len(a.ranks) == 0 {
		return ""
	}
	return a.ranks[0].conn.host.Addr + ":" + itoa(a.ranks[0].pgid)
}

// String names the attempt in errors.
func (a *attempt) String() string {
	return fmt.Sprintf("job %s attempt %d", a.spec.JobID, a.spec.Attempt)
}

// Deliver sends sig to the process group of every rank still running.
func (a *attempt) Deliver(ctx context.Context, sig syscall.Signal) error {
	return a.killAll(sig, true)
}

// Escalate sends a stop's sig to the groups of the ranks still running.
func (a *attempt) Escalate(ctx context.Context, sig syscall.Signal) {
	if err := a.killAll(sig, true); err != nil {
		a.logger.Warn("signal ranks", zap.String("signal", unix.SignalName(sig)), zap.Error(err))
	}
}

// killAll sends sig to the groups of the ranks, only of those still
// running when liveOnly, with one remote exec per host, in parallel.
func (a *attempt) killAll(sig syscall.Signal, liveOnly bool) error {
	name := strings.TrimPrefix(unix.SignalName(sig), "SIG")
	byConn := map[*conn][]int{}
	a.mu.Lock()
	for _, rp := range a.ranks {
		if liveOnly && a.exited[rp.rank] {
			continue
		}
		byConn[rp.conn] = append(byConn[rp.conn], rp.pgid)
	}
	a.mu.Unlock()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for c, pgids := range byConn {
		if c.lostErr() != nil {
			continue
		}
		wg.Go(func() {
			if err := signalGroups(c, killCommand(name, pgids)); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("host %s: %w", c.host.Addr, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// signalGroups runs a killCommand on c, bounded like every remote command.
func signalGroups(c *conn, cmd string) error {
	_, err := output(c.client, cmd)
	return err
}

// supervise starts the output readers and runs the attempt to its end.
func (a *attempt) supervise() {
	for _, rp := range a.ranks {
		a.readers.Go(func() { a.readOutput(rp.rank, plugins.Stdout, rp.stdout) })
		if rp.stderr != nil {
			a.readers.Go(func() { a.readOutput(rp.rank, plugins.Stderr, rp.stderr) })
		}
	}
	supervisor.RunRanks(a.Supervisor, a.waitRank)
}

// Finish runs once every rank's session has ended: it kills what the ranks
// left behind in their groups, lets the readers drain before the
// connections close, closes them, and names the hosts the attempt lost.
// (A group whose leader has exited and been reaped keeps its id while any
// member lives; once none does, the id could in principle be reused by then.)
func (a *attempt) Finish(ctx context.Context, ranks []plugins.RankResult) supervisor.End {
	if err := a.killAll(unix.SIGKILL, false); err != nil {
		a.logger.Warn("kill leftover processes", zap.Error(err))
	}
	drained := make(chan struct{})
	go func() { a.readers.Wait(); close(drained) }()
	drainBy := time.Now().Add(outputDrainTimeout)
	select {
	case <-drained:
	case <-time.After(time.Until(drainBy)):
		a.logger.Warn("output still open after the attempt ended")
	}
	a.closeForwarders(max(time.Until(drainBy), 100*time.Millisecond))
	for _, rp := range a.ranks {
		_ = rp.sess.Close()
	}
	a.closeConns()
	<-drained
	return supervisor.End{LostHosts: a.recordLost()}
}

// waitRank waits for rank's session to end and turns its exit into a RankResult.
func (a *attempt) waitRank(rank int) supervisor.Exit {
	rp := a.ranks[rank]
	err := rp.sess.Wait()
	a.mu.Lock()
	a.exited[rank] = true
	a.mu.Unlock()
	ex := supervisor.Exit{Rank: rank, Result: plugins.RankResult{PID: rp.pgid}}
	var ee *gossh.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Signal() != "":
		name := "SIG" + ee.Signal()
		if s := unix.SignalNum(name); s != 0 {
			ex.Result = supervisor.Signaled(s)
		} else {
			ex.Result = plugins.RankResult{ExitCode: lostExitCode, Signal: name}
		}
		ex.Result.PID = rp.pgid
	case errors.As(err, &ee) && a.l.opts.Detach && ee.ExitStatus() > 128 && ee.ExitStatus() < 128+65:
		// A detached rank's status comes from its wrapper, as a shell
		// reports a worker killed by a signal: 128 + the signal.
		ex.Result = supervisor.Signaled(syscall.Signal(ee.ExitStatus() - 128))
		ex.Result.PID = rp.pgid
	case errors.As(err, &ee):
		ex.Result.ExitCode = ee.ExitStatus()
	default:
		ex.Result.ExitCode = lostExitCode
		ex.Lost = rp.conn.setLost(fmt.Errorf("host %s: %w: session of rank %d ended without an exit status: %w",
			rp.conn.host.dialAddr(), ErrHostUnreachable, rp.rank, err))
	}
	return ex
}

// readOutput delivers the lines of one stream of one rank (or discards
// them without an Output), cutting lines longer than MaxLineBytes.
func (a *attempt) readOutput(rank int, stream plugins.Stream, r io.Reader) {
	if a.spec.Output == nil {
		_, _ = io.Copy(io.Discard, r)
		return
	}
	out := func(line string, _ bool) { a.spec.Output(rank, stream, line) }
	if err := lineio.Read(r, a.l.opts.MaxLineBytes, out); err != nil {
		a.logger.Warn("read output", zap.Int("rank", rank), zap.String("stream", string(stream)), zap.Error(err))
	}
}
