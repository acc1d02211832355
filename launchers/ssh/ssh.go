// Package ssh is the launcher that starts a job attempt's workers on a list
// of hosts over SSH (golang.org/x/crypto/ssh), with keys from files or the
// SSH agent and host keys verified against known_hosts files.
//
// # Placement
//
// The K workers of an attempt fill the inventory's hosts in order, each up
// to its Slots: with hosts a (2 slots) and b (2 slots), K=3 puts ranks 0
// and 1 on a and rank 2 on b. MASTER_ADDR is the first host's Addr and
// MASTER_PORT is Options.MasterPort or a port that was free on that host a
// moment before (asked of its sshd with a remote port forward to port 0).
// In plugins.ModeSelf one process runs on the first host.
//
// # Remote processes
//
// Each worker is one SSH session on its host's connection (one connection
// per host and attempt). The remote command is a small sh wrapper (see
// remoteCommand) that prints its process-group id first and then execs the
// worker with its environment from plugins.WorkerEnv; every argument, key
// and value is single-quoted, so nothing is interpreted by a shell. The
// launcher signals a worker with a second exec, `kill -s SIG -- -PGID`,
// because sshd ignores SSH signal requests for root and closing a session
// without a PTY leaves its command running.
//
// With Options.Detach (cloudvm's instances) each rank runs apart from its
// session instead (detachedCommand): a wrapper made a session of its own
// by setsid runs the worker with its output in files on the host and
// writes its exit status there; the session follows the files and exits
// with that status. The worker outlives the session and the daemon, and a
// daemon that restarts follows it again (Reattach).
//
// # Attempt lifecycle
//
//	Start ──► running ──┬─ every rank exits 0 ───────────────────────────────┐
//	                    ├─ a rank fails, or its host is lost ──► stopping ──┤
//	                    └─ Stop(ctx, grace) ───────────────────► stopping ──┤
//	                                                                         ▼
//	   stopping: SIGTERM to every group, SIGKILL to every group      cleaning up:
//	   when the grace ends and ranks remain                 SIGKILL to every group
//	                                                        (descendants), close
//	                                                        connections, Wait returns
//
// Every connection sends an OpenSSH keepalive each Options.KeepaliveInterval;
// a host that does not answer within Options.KeepaliveTimeout is lost: its
// connection is closed, its ranks count as failed (exit 255) and the others
// are stopped.
//
// # Lost hosts
//
// A lost host is named in Result.LostHosts and Wait returns no error: the
// loss is an outcome of the attempt, like a failed rank, and a Result with
// an error does not cross the plugin's gRPC boundary. (The log has the
// ErrHostUnreachable detail.) A host that cannot be dialled at Start is lost
// too; Start then fails with an error wrapping ErrHostUnreachable.
//
// The launcher leaves a lost host out of Capabilities and placement until it
// answers again: Capabilities and Start dial each lost host (bounded by
// Options.ProbeTimeout, at most once per Options.ProbeInterval). When it
// answers, the launcher first kills, over that connection, the process
// groups of the attempts that lost it (ranks cut off from their peers that
// would otherwise hang in a collective), checking that each group leader
// still has the attempt's SCAV_JOB_ID and SCAV_ATTEMPT, and only then
// offers the host again. The daemon can so relaunch a job on the hosts that
// remain, with fewer workers, and grow it back later.
//
// # Telemetry from other hosts
//
// Workers on another host cannot reach the daemon's unix socket
// (AttemptSpec.Socket). Unless Options.NoTelemetryForward is set, the
// launcher makes a private directory (mode 0700) under $TMPDIR (else /tmp) on each host,
// asks that host's sshd to listen on a unix socket in it (OpenSSH
// streamlocal forwarding, on by default in sshd), sets the host's workers'
// SCAV_SOCKET to it and proxies every connection made there, both ways, to a
// new connection on the daemon's socket. At the attempt's end the listener
// is closed, open connections get a moment to drain and the directory is
// removed. Forwarding is the default because a host of the inventory
// usually runs no scavd and does not share the daemon's filesystem: without
// it the workers' telemetry would go nowhere and the optimizer would have
// nothing to fit. Turn it off when a scavd runs on every host (the path in
// AttemptSpec.Socket is then valid there) or the hosts reach the daemon's
// socket directly (the daemon's own machine, a shared filesystem).
package ssh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/scavenger-ml/scavenger/plugins"
)

// Defaults of Options.
const (
	DefaultUser              = "root"
	DefaultGrace             = 5 * time.Second
	DefaultDialTimeout       = 10 * time.Second
	DefaultKeepaliveInterval = 2 * time.Second
	DefaultKeepaliveTimeout  = 5 * time.Second
	DefaultMaxLineBytes      = 64 << 10
	DefaultProbeTimeout      = 2 * time.Second
	DefaultProbeInterval     = 5 * time.Second
)

// Options configure an SSH Launcher.
type Options struct {
	// Logger is required; the launcher names its logger "ssh".
	Logger *zap.Logger
	// Hosts is the inventory, in placement order; at least one is required.
	Hosts []Host
	// User is the login user of hosts that name none (default DefaultUser).
	User string
	// KeyFiles are unencrypted private key files to authenticate with.
	KeyFiles []string
	// UseAgent adds the keys of the SSH agent at $SSH_AUTH_SOCK.
	UseAgent bool
	// KnownHosts are the known_hosts files host keys are checked against
	// (default ~/.ssh/known_hosts). A host whose key is not there is refused.
	KnownHosts []string
	// MasterPort fixes MASTER_PORT; 0 picks a free port on the first host.
	MasterPort int
	// Grace is how long the peers of a failed rank get between SIGTERM and
	// SIGKILL (default DefaultGrace). Stop takes its own grace.
	Grace time.Duration
	// DialTimeout bounds connecting and authenticating to one host.
	DialTimeout time.Duration
	// KeepaliveInterval and KeepaliveTimeout detect a lost host: a keepalive
	// is sent every interval and must be answered within the timeout.
	KeepaliveInterval time.Duration
	KeepaliveTimeout  time.Duration
	// MaxLineBytes is the longest output line delivered whole; longer lines
	// are delivered in pieces (default DefaultMaxLineBytes).
	MaxLineBytes int
	// ProbeTimeout bounds dialling a lost host to see whether it answers
	// again (default DefaultProbeTimeout, at most DialTimeout).
	ProbeTimeout time.Duration
	// ProbeInterval is the least time between two probes of a lost host;
	// between them it counts as still lost (default DefaultProbeInterval).
	ProbeInterval time.Duration
	// NoTelemetryForward gives the workers AttemptSpec.Socket as it is
	// instead of forwarding it to each host over SSH (see the package
	// comment): set it when a scavd runs on every host or the hosts share
	// the daemon's machine.
	NoTelemetryForward bool
	// PreemptSignal, when set, is the signal (e.g. "USR1") the workers get
	// before their machine is taken away (SCAV_PREEMPT_SIGNAL): set by a
	// launcher that hears of pre-emptions and delivers them with Signal
	// (launchers/cloudvm).
	PreemptSignal string
	// Detach runs each rank apart from its SSH session (see
	// detachedCommand): it outlives the session and the daemon, its output
	// in files on its host that the session follows, so that a daemon that
	// restarts reattaches to it (Reattach). It needs setsid and GNU tail on
	// the hosts (launchers/cloudvm's instances).
	Detach bool
}

// Launcher starts attempts over SSH. It implements plugins.Launcher.
type Launcher struct {
	opts      Options
	logger    *zap.Logger
	config    gossh.ClientConfig // User is set per host
	agentConn net.Conn
	closeOnce sync.Once
	names     []string // hostName of each host

	probeMu sync.Mutex // one probe round at a time
	mu      sync.Mutex
	lost    map[int]*lostHost // by index in Options.Hosts
}

// lostHost is the launcher's memory of a host that stopped answering.
type lostHost struct {
	err     error
	probed  time.Time // last failed contact
	orphans []orphan  // process groups left running there
	dirs    []string  // telemetry forward directories left there
}

// orphan is a process group of an attempt that lost its host.
type orphan struct {
	job     string
	attempt int
	pgid    int
}

var _ plugins.Launcher = (*Launcher)(nil)

// New checks opts, loads the keys and the known_hosts files and returns the
// launcher. Close releases the agent connection.
func New(opts Options) (*Launcher, error) {
	if opts.Logger == nil {
		return nil, errors.New("new ssh launcher: Options.Logger is required")
	}
	if len(opts.Hosts) == 0 {
		return nil, fmt.Errorf("new ssh launcher: %w: no hosts", ErrInventory)
	}
	for i, h := range opts.Hosts {
		if h.Addr == "" || h.Slots < 0 || h.Port < 0 || h.Port > 65535 {
			return nil, fmt.Errorf("new ssh launcher: %w: host %d %+v", ErrInventory, i, h)
		}
	}
	if opts.User == "" {
		opts.User = DefaultUser
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.KeepaliveInterval <= 0 {
		opts.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if opts.KeepaliveTimeout <= 0 {
		opts.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = DefaultMaxLineBytes
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	opts.ProbeTimeout = min(opts.ProbeTimeout, opts.DialTimeout)
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = DefaultProbeInterval
	}
	l := &Launcher{opts: opts, logger: opts.Logger.Named("ssh"), lost: map[int]*lostHost{}}
	for _, h := range opts.Hosts {
		l.names = append(l.names, hostName(opts.Hosts, h))
	}

	known := opts.KnownHosts
	if len(known) == 0 {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("new ssh launcher: known_hosts: %w", err)
		}
		known = []string{filepath.Join(home, ".ssh", "known_hosts")}
	}
	hostKeys, err := knownhosts.New(known...)
	if err != nil {
		return nil, fmt.Errorf("new ssh launcher: load known_hosts %v: %w", known, err)
	}

	var auth []gossh.AuthMethod
	var signers []gossh.Signer
	for _, f := range opts.KeyFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("new ssh launcher: read key %s: %w", f, err)
		}
		s, err := gossh.ParsePrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("new ssh launcher: parse key %s: %w", f, err)
		}
		signers = append(signers, s)
	}
	if len(signers) > 0 {
		auth = append(auth, gossh.PublicKeys(signers...))
	}
	if opts.UseAgent {
		sock := os.Getenv("SSH_AUTH_SOCK")
		if sock == "" {
			return nil, errors.New("new ssh launcher: UseAgent is set but SSH_AUTH_SOCK is empty")
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			return nil, fmt.Errorf("new ssh launcher: connect to agent %s: %w", sock, err)
		}
		l.agentConn = c
		auth = append(auth, gossh.PublicKeysCallback(agent.NewClient(c).Signers))
	}
	if len(auth) == 0 {
		return nil, errors.New("new ssh launcher: no key files and no agent: nothing to authenticate with")
	}
	l.config = gossh.ClientConfig{Auth: auth, HostKeyCallback: hostKeys, Timeout: opts.DialTimeout}
	return l, nil
}

// Close releases the agent connection; attempts already started are not
// affected beyond that. It is safe to call twice.
func (l *Launcher) Close() error {
	var err error
	l.closeOnce.Do(func() {
		if l.agentConn != nil {
			err = l.agentConn.Close()
		}
	})
	return err
}

// Name returns "ssh".
func (l *Launcher) Name() string { return "ssh" }

// hostName is how Capabilities.Hosts and Result.LostHosts name h: its Addr,
// or Addr:port when another host of the inventory has the same Addr.
func hostName(hosts []Host, h Host) string {
	for _, o := range hosts {
		if o.Addr == h.Addr && o.port() != h.port() {
			return h.dialAddr()
		}
	}
	return h.Addr
}

// Capabilities reports the names and total slots of the hosts that are not
// lost, after probing the lost ones (see the package comment).
func (l *Launcher) Capabilities(ctx context.Context) (plugins.Capabilities, error) {
	c := plugins.Capabilities{}
	for _, i := range l.available(ctx) {
		c.MaxWorkers += l.opts.Hosts[i].slots()
		c.Hosts = append(c.Hosts, l.names[i])
	}
	return c, nil
}

// available probes the lost hosts due for it and returns the indices of
// the hosts that are not lost, in inventory order.
func (l *Launcher) available(ctx context.Context) []int {
	l.probeMu.Lock()
	defer l.probeMu.Unlock()
	now := time.Now()
	type due struct {
		i       int
		orphans []orphan
		dirs    []string
	}
	var todo []due
	l.mu.Lock()
	for i, lh := range l.lost {
		if now.Sub(lh.probed) >= l.opts.ProbeInterval {
			todo = append(todo, due{i, slices.Clone(lh.orphans), slices.Clone(lh.dirs)})
		}
	}
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, d := range todo {
		wg.Go(func() {
			err := l.probe(ctx, d.i, d.orphans, d.dirs)
			l.mu.Lock()
			defer l.mu.Unlock()
			lh := l.lost[d.i]
			if lh == nil {
				return
			}
			if err != nil {
				lh.err, lh.probed = err, time.Now()
				l.logger.Debug("lost host still lost", zap.String("host", l.names[d.i]), zap.Error(err))
				return
			}
			// What was added while probing is for the next probe.
			lh.orphans = lh.orphans[len(d.orphans):]
			lh.dirs = lh.dirs[len(d.dirs):]
			if len(lh.orphans) == 0 && len(lh.dirs) == 0 {
				delete(l.lost, d.i)
				l.logger.Info("lost host answers again", zap.String("host", l.names[d.i]))
			}
		})
	}
	wg.Wait()
	var out []int
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.opts.Hosts {
		if l.lost[i] == nil {
			out = append(out, i)
		}
	}
	return out
}

// probe dials host i within ProbeTimeout, kills the orphans there and
// removes the directories left.
func (l *Launcher) probe(ctx context.Context, i int, orphans []orphan, dirs []string) error {
	ctx, cancel := context.WithTimeout(ctx, l.opts.ProbeTimeout)
	defer cancel()
	c, err := l.dial(ctx, l.opts.Hosts[i])
	if err != nil {
		return err
	}
	defer c.Close()
	// A host that stalls after the handshake must not hold the probe (and
	// every Start and Capabilities behind it): the cleanup gets its own
	// bound, then the connection is closed under it.
	cleanup, cancelCleanup := context.WithTimeout(context.Background(), l.opts.ProbeTimeout+killTimeout)
	defer cancelCleanup()
	stop := context.AfterFunc(cleanup, func() { _ = c.Close() })
	defer stop()
	if len(orphans) > 0 {
		if _, err := output(c, orphanKillCommand(orphans)); err != nil {
			return fmt.Errorf("kill the process groups left there: %w", err)
		}
		l.logger.Info("killed the process groups of attempts that lost the host", zap.String("host", l.names[i]), zap.Int("groups", len(orphans)))
	}
	if len(dirs) > 0 {
		cmd := "rm -rf --"
		for _, d := range dirs {
			cmd += " " + Quote(d)
		}
		if _, err := output(c, cmd); err != nil {
			return fmt.Errorf("remove the telemetry directories left there: %w", err)
		}
	}
	return nil
}

// markLost records that host i stopped answering; orphans are the process
// groups of the attempt that were running there and dirs its telemetry
// forward directories there.
func (l *Launcher) markLost(i int, err error, orphans []orphan, dirs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lh := l.lost[i]
	if lh == nil {
		lh = &lostHost{}
		l.lost[i] = lh
	}
	lh.err, lh.probed = err, time.Now()
	lh.orphans = append(lh.orphans, orphans...)
	lh.dirs = append(lh.dirs, dirs...)
}

// placement is where one process of an attempt runs.
type placement struct {
	host       int // index in Options.Hosts
	localRank  int
	localWorld int
}

// place fills the hosts idx (indices into hosts) in order; n is the number
// of processes.
func place(hosts []Host, idx []int, n int) ([]placement, error) {
	var out []placement
	for _, i := range idx {
		k := min(hosts[i].slots(), n-len(out))
		for j := range k {
			out = append(out, placement{host: i, localRank: j, localWorld: k})
		}
		if len(out) == n {
			return out, nil
		}
	}
	return nil, fmt.Errorf("%d workers above the %d slots of the hosts that answer: %w", n, len(out), plugins.ErrUnsupported)
}

// Start validates spec, connects to the hosts it needs and starts one
// session per process (see the package comment); it returns once every
// remote process has reported its process group. The processes are not
// tied to ctx, which only bounds the start. Config.Nodes above the number
// of hosts and more workers than slots are ErrUnsupported.
func (l *Launcher) Start(ctx context.Context, spec plugins.AttemptSpec) (plugins.Handle, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("start job %s attempt %d: %w", spec.JobID, spec.Attempt, err)
	}
	fail := func(err error) (plugins.Handle, error) {
		return nil, fmt.Errorf("start job %s attempt %d: %w", spec.JobID, spec.Attempt, err)
	}
	idx := l.available(ctx)
	if spec.Config.Nodes > len(idx) {
		return fail(fmt.Errorf("%d nodes, %d hosts that answer: %w", spec.Config.Nodes, len(idx), plugins.ErrUnsupported))
	}
	n := spec.Config.Workers
	if plugins.ResolveMode(spec.Mode, spec.Command) == plugins.ModeSelf {
		n = 1
	}
	places, err := place(l.opts.Hosts, idx, n)
	if err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	a := newAttempt(l, spec, places)
	if err := a.start(ctx); err != nil {
		return fail(err)
	}
	go a.supervise()
	return a, nil
}

// dial connects to h, bounded by ctx and Options.DialTimeout.
func (l *Launcher) dial(parent context.Context, h Host) (*gossh.Client, error) {
	ctx, cancel := context.WithTimeout(parent, l.opts.DialTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", h.dialAddr())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w: %w", h.dialAddr(), ErrHostUnreachable, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	cfg := l.config
	cfg.User = h.User
	if cfg.User == "" {
		cfg.User = l.opts.User
	}
	c, chans, reqs, err := gossh.NewClientConn(conn, h.dialAddr(), &cfg)
	if !stop() { // ctx ended during the handshake
		if err == nil {
			_ = c.Close()
		}
		_ = conn.Close()
		if parent.Err() == nil {
			// The TCP connection was made but the host did not finish the
			// handshake in time: as good as unreachable.
			return nil, fmt.Errorf("ssh %s: %w: handshake: %w", h.dialAddr(), ErrHostUnreachable, ctx.Err())
		}
		return nil, fmt.Errorf("ssh %s: %w", h.dialAddr(), ctx.Err())
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("ssh %s: %w", h.dialAddr(), err)
	}
	_ = conn.SetDeadline(time.Time{})
	return gossh.NewClient(c, chans, reqs), nil
}

// freeRemotePort asks the host's sshd to bind port 0 on its loopback and
// returns the port it got, closing the forward at once.
func freeRemotePort(c *gossh.Client) (int, error) {
	ln, err := c.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick master port (set Options.MasterPort when the host forbids forwarding): %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, fmt.Errorf("pick master port: close forward %d: %w", port, err)
	}
	return port, nil
}

func itoa(i int) string { return strconv.Itoa(i) }
