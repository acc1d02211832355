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

// rankExit is how a rank's session ended.
type rankExit struct {
	rank int
	res  plugins.RankResult
	lost error // the host was lost
}

func (e rankExit) failed() bool { return e.lost != nil || e.res.ExitCode != 0 }

// attempt is a started attempt; it implements plugins.Handle.
type attempt struct {
	l      *Launcher
	spec   plugins.AttemptSpec
	places []placement
	logger *zap.Logger
	conns  map[int]*conn // by host index
	ranks  []*rankProc
	port   int

	stops *plugins.StopRequests // Stop calls, for the supervisor
	done  chan struct{}
	kaWG  sync.WaitGroup // keepalive loops

	mu       sync.Mutex
	stopping bool
	finished bool
	// signals counts the Signal calls in flight: the connections they use
	// stay open until they are done (their rank may end at the signal).
	signals sync.WaitGroup
	exited  []bool
	result  plugins.Result
}

var _ plugins.Handle = (*attempt)(nil)

func newAttempt(l *Launcher, spec plugins.AttemptSpec, places []placement) *attempt {
	return &attempt{
		l:      l,
		spec:   spec,
		places: places,
		logger: l.logger.With(zap.String("job", spec.JobID), zap.Int("attempt", spec.Attempt)),
		conns:  map[int]*conn{},
		stops:  plugins.NewStopRequests(),
		done:   make(chan struct{}),
		exited: make([]bool, len(places)),
	}
}

// start connects to the hosts and starts every rank. On failure it kills
// what it started and closes the connections.
func (a *attempt) start(ctx context.Context) error {
	// Connect to every host used, in parallel.
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
	kaLog := a.logger // a.logger is replaced below; the loops keep this one
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
				c.fwd, errs[i] = startForwarder(c.client, a.l.names[hi], a.spec.Socket, a.spec.JobID, a.spec.Attempt, kaLog)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			a.abort()
			return err
		}
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
		rp, err := a.startRank(ctx, r, a.conns[p.host], remoteCommand(a.spec.Dir, env, argv))
		if rp != nil {
			a.ranks = append(a.ranks, rp)
		}
		if err != nil {
			a.abort()
			return fmt.Errorf("start rank %d on %s: %w", r, a.conns[p.host].host.Addr, err)
		}
	}
	a.logger = a.logger.With(zap.String("id", a.ID()))
	a.logger.Info("attempt started", zap.Int("processes", len(a.places)), zap.Strings("command", argv),
		zap.String("master_addr", first.host.Addr), zap.Int("master_port", a.port))
	return nil
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

// Wait blocks until the attempt has finished and returns its Result; every
// call gets the same Result. A lost host is named in Result.LostHosts (and
// is no error, see the package comment). It returns ctx's error if ctx ends first.
func (a *attempt) Wait(ctx context.Context) (plugins.Result, error) {
	select {
	case <-a.done:
		r := a.result
		r.Ranks = slices.Clone(r.Ranks)
		r.LostHosts = slices.Clone(r.LostHosts)
		return r, nil
	case <-ctx.Done():
		return plugins.Result{}, fmt.Errorf("wait for job %s attempt %d: %w", a.spec.JobID, a.spec.Attempt, ctx.Err())
	}
}

// Signal sends sig to the process group of every rank still running. It
// fails with plugins.ErrStopped once the attempt is being stopped and with
// plugins.ErrFinished once its processes have ended.
func (a *attempt) Signal(ctx context.Context, sig syscall.Signal) error {
	a.mu.Lock()
	switch {
	case a.finished:
		a.mu.Unlock()
		return fmt.Errorf("signal %s to job %s attempt %d: %w", unix.SignalName(sig), a.spec.JobID, a.spec.Attempt, plugins.ErrFinished)
	case a.stopping:
		a.mu.Unlock()
		return fmt.Errorf("signal %s to job %s attempt %d: %w", unix.SignalName(sig), a.spec.JobID, a.spec.Attempt, plugins.ErrStopped)
	}
	a.signals.Add(1)
	a.mu.Unlock()
	defer a.signals.Done()
	if err := a.killAll(sig, true); err != nil {
		return fmt.Errorf("signal %s to job %s attempt %d: %w", unix.SignalName(sig), a.spec.JobID, a.spec.Attempt, err)
	}
	return nil
}

// Stop sends SIGTERM to every rank's group, SIGKILL when grace has passed
// (at once for grace <= 0), and returns when every rank has ended. A later
// call with a shorter grace brings the SIGKILL forward. If ctx ends first
// Stop returns its error and the stop goes on. Stopping a finished attempt
// does nothing.
func (a *attempt) Stop(ctx context.Context, grace time.Duration) error {
	if err := a.stops.Stop(ctx, grace, a.done); err != nil {
		return fmt.Errorf("stop job %s attempt %d: %w", a.spec.JobID, a.spec.Attempt, err)
	}
	return nil
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

// signalRanks signals the live ranks from the supervisor, logging failures.
func (a *attempt) signalRanks(sig syscall.Signal) {
	if err := a.killAll(sig, true); err != nil {
		a.logger.Warn("signal ranks", zap.String("signal", unix.SignalName(sig)), zap.Error(err))
	}
}

// supervise runs the attempt to its end, cleans up, joins every goroutine
// it started and publishes the result.
func (a *attempt) supervise() {
	defer close(a.done)
	n := len(a.ranks)
	exits := make(chan rankExit, n)
	var waiters, readers sync.WaitGroup
	for _, rp := range a.ranks {
		waiters.Go(func() { exits <- a.waitRank(rp) })
		readers.Go(func() { a.readOutput(rp.rank, plugins.Stdout, rp.stdout) })
		if rp.stderr != nil {
			readers.Go(func() { a.readOutput(rp.rank, plugins.Stderr, rp.stderr) })
		}
	}

	var (
		running    = n
		failedRank = -1
		stopped    = make([]bool, n)
		results    = make([]plugins.RankResult, n)
		lostErr    error
		stopByCall bool
		esc        plugins.Escalation
	)
	defer esc.Close()
	beginStop := func(deadline time.Time) {
		if esc.Begin(deadline) {
			a.mu.Lock()
			a.stopping = true
			a.mu.Unlock()
			a.signalRanks(unix.SIGTERM)
		}
	}
	for running > 0 {
		select {
		case ex := <-exits:
			running--
			a.mu.Lock()
			a.exited[ex.rank] = true
			a.mu.Unlock()
			results[ex.rank] = ex.res
			if ex.lost != nil && lostErr == nil {
				lostErr = ex.lost
			}
			switch {
			case esc.Stopping() && ex.lost == nil:
				stopped[ex.rank] = true
			case ex.failed() && failedRank < 0:
				failedRank = ex.rank
				if running > 0 {
					a.logger.Warn("rank failed; stopping the others", zap.Int("rank", ex.rank),
						zap.Int("exit_code", ex.res.ExitCode), zap.NamedError("host_lost", ex.lost), zap.Duration("grace", a.l.opts.Grace))
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
			a.logger.Warn("grace over; killing the groups")
			a.signalRanks(unix.SIGKILL)
		}
	}
	// Kill what the ranks left behind in their groups, then let the
	// readers drain before the connections close. (A group whose leader
	// has exited and been reaped keeps its id while any member lives; once
	// none does, the id could in principle be reused by then.)
	if err := a.killAll(unix.SIGKILL, false); err != nil {
		a.logger.Warn("kill leftover processes", zap.Error(err))
	}
	a.mu.Lock()
	a.finished = true // no Signal starts from now on
	a.mu.Unlock()
	a.signals.Wait() // bounded: each remote command is (killTimeout)
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
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
	waiters.Wait()

	lostHosts := a.recordLost()

	for i := range results {
		results[i].Stopped = stopped[i]
	}
	res := plugins.Result{FailedRank: failedRank, Stopped: stopByCall, Ranks: results, LostHosts: lostHosts}
	if failedRank >= 0 {
		res.ExitCode = results[failedRank].ExitCode
	}
	a.mu.Lock()
	a.result = res
	a.mu.Unlock()
	a.logger.Info("attempt finished", zap.Int("exit_code", res.ExitCode), zap.Int("failed_rank", res.FailedRank),
		zap.Bool("stopped", res.Stopped), zap.Strings("lost_hosts", lostHosts), zap.NamedError("host_lost", lostErr))
}

// waitRank waits for rp's session to end and turns its exit into a RankResult.
func (a *attempt) waitRank(rp *rankProc) rankExit {
	err := rp.sess.Wait()
	ex := rankExit{rank: rp.rank, res: plugins.RankResult{Rank: rp.rank, PID: rp.pgid}}
	var ee *gossh.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Signal() != "":
		name := "SIG" + ee.Signal()
		ex.res.Signal = name
		if s := unix.SignalNum(name); s != 0 {
			ex.res.ExitCode = 128 + int(s)
		} else {
			ex.res.ExitCode = lostExitCode
		}
	case errors.As(err, &ee):
		ex.res.ExitCode = ee.ExitStatus()
	default:
		ex.res.ExitCode = lostExitCode
		ex.lost = rp.conn.setLost(fmt.Errorf("host %s: %w: session of rank %d ended without an exit status: %w",
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
	br := bufio.NewReaderSize(r, a.l.opts.MaxLineBytes)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			s := strings.TrimSuffix(strings.TrimSuffix(string(line), "\n"), "\r")
			a.spec.Output(rank, stream, s)
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return
		default:
			a.logger.Warn("read output", zap.Int("rank", rank), zap.String("stream", string(stream)), zap.Error(err))
			_, _ = io.Copy(io.Discard, r)
			return
		}
	}
}
