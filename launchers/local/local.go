// Package local is the launcher that runs a job attempt's workers as
// processes on this node, the default launcher of scavd.
//
// # Attempt lifecycle
//
//	Start ──► running ──┬─ every rank exits 0 ──────────────────────────────┐
//	                    ├─ a rank fails (exit != 0 or signal) ──► stopping ─┤
//	                    └─ Stop(ctx, grace) ────────────────────► stopping ─┤
//	                                                                        ▼
//	   stopping: SIGTERM to the group, SIGKILL to the group         cleaning up
//	   when the grace ends and ranks remain                               │
//	                                                                        ▼
//	                                                          finished (Wait returns)
//
// Start validates the spec, picks a free MASTER_PORT, and starts the
// processes: one per rank in plugins.ModeRanks, one in plugins.ModeSelf (the
// command, such as torchrun, starts the workers). All processes of an attempt
// share one new process group — the first rank's pid — so that signals to the
// group reach the workers' own children too. Each process's stdout and stderr
// are read line by line and handed to AttemptSpec.Output.
//
// While running, the first rank that exits non-zero or by a signal is the
// attempt's failure: the launcher stops the others (SIGTERM, then SIGKILL
// after Options.Grace) instead of letting them hang in a collective. Stop
// does the same with the caller's grace. Ranks that end after stopping began
// are marked Stopped.
//
// When every rank has ended, the launcher SIGKILLs the process group so that
// no descendant outlives the attempt, waits until the group has no live
// member, reaps the ranks (which it leaves unreaped until then, so that the
// group id cannot be reused while it still signals it), lets the Reaper
// collect orphaned zombies when one is configured, drains the output readers
// and publishes the Result. Wait returns it to every caller, as often as asked.
//
// Every started attempt owns one supervising goroutine, one waiter per rank
// and one reader per output stream; all end, and are joined by the
// supervisor, before Wait returns. A started attempt must be waited for or
// stopped.
package local

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
)

// Defaults of Options.
const (
	DefaultMasterAddr   = "127.0.0.1"
	DefaultGrace        = 5 * time.Second
	DefaultMaxLineBytes = 64 << 10
)

// Options configure a local Launcher.
type Options struct {
	// Logger is required; the launcher names its logger "local".
	Logger *zap.Logger
	// KillOnParentDeath makes the kernel SIGKILL every rank process when this
	// process dies (Pdeathsig), for when scavctl embeds the daemon and may be
	// SIGKILLed itself. The kernel ties it to the OS thread that started the
	// process: do not call Start from a goroutine that locked its OS thread
	// and exits without unlocking it.
	KillOnParentDeath bool
	// MasterAddr is MASTER_ADDR for the workers; the free MASTER_PORT is
	// chosen by binding it. Default DefaultMasterAddr.
	MasterAddr string
	// Grace is how long the peers of a failed rank get between SIGTERM and
	// SIGKILL. Default DefaultGrace. (Stop takes its own grace.)
	Grace time.Duration
	// MaxLineBytes is the longest output line delivered whole; longer lines
	// are delivered in pieces of at most this many bytes. Default DefaultMaxLineBytes.
	MaxLineBytes int
	// MaxWorkers caps the workers of one attempt (0: no cap).
	MaxWorkers int
	// Reaper, when set, is told about every attempt's process group so that
	// it reaps the attempt's orphaned descendants; Wait then also waits until
	// none is left, not even as a zombie. The daemon starts it with StartReaper.
	Reaper *Reaper
}

// Launcher starts attempts as local processes. It implements plugins.Launcher.
type Launcher struct {
	opts   Options
	logger *zap.Logger
}

var _ plugins.Launcher = (*Launcher)(nil)

// New returns a local launcher. It panics when opts.Logger is nil.
func New(opts Options) *Launcher {
	if opts.Logger == nil {
		panic("local.New: Options.Logger is required")
	}
	if opts.MasterAddr == "" {
		opts.MasterAddr = DefaultMasterAddr
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = DefaultMaxLineBytes
	}
	return &Launcher{opts: opts, logger: opts.Logger.Named("local")}
}

// Name returns "local".
func (l *Launcher) Name() string { return "local" }

// Capabilities reports this host and Options.MaxWorkers; the local launcher
// offers no machine types. Run as root, it runs workers as other users.
func (l *Launcher) Capabilities(ctx context.Context) (plugins.Capabilities, error) {
	host, err := os.Hostname()
	if err != nil {
		return plugins.Capabilities{}, fmt.Errorf("local capabilities: hostname: %w", err)
	}
	return plugins.Capabilities{MaxWorkers: l.opts.MaxWorkers, Hosts: []string{host}, RunAs: os.Geteuid() == 0}, nil
}

// Start validates spec and starts its processes (see the package comment);
// it returns once they all exist. The processes are not tied to ctx, which
// only bounds the start. Config.MachineType is ignored; Config.Nodes above 1
// and more workers than Options.MaxWorkers are ErrUnsupported.
func (l *Launcher) Start(ctx context.Context, spec plugins.AttemptSpec) (plugins.Handle, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("start job %s attempt %d: %w", spec.JobID, spec.Attempt, err)
	}
	if spec.Config.Nodes > 1 {
		return nil, fmt.Errorf("start job %s attempt %d: %d nodes: %w", spec.JobID, spec.Attempt, spec.Config.Nodes, plugins.ErrUnsupported)
	}
	if l.opts.MaxWorkers > 0 && spec.Config.Workers > l.opts.MaxWorkers {
		return nil, fmt.Errorf("start job %s attempt %d: %d workers above the limit of %d: %w",
			spec.JobID, spec.Attempt, spec.Config.Workers, l.opts.MaxWorkers, plugins.ErrUnsupported)
	}
	if u := spec.User; u != nil && int(u.UID) != os.Geteuid() && os.Geteuid() != 0 {
		return nil, fmt.Errorf("start job %s attempt %d as user %s: only root runs workers as another user: %w",
			spec.JobID, spec.Attempt, u.Name, plugins.ErrUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start job %s attempt %d: %w", spec.JobID, spec.Attempt, err)
	}
	port, err := freePort(l.opts.MasterAddr)
	if err != nil {
		return nil, fmt.Errorf("start job %s attempt %d: %w", spec.JobID, spec.Attempt, err)
	}
	a := newAttempt(l, spec, port)
	if err := a.start(ctx); err != nil {
		return nil, err
	}
	go a.supervise()
	return a, nil
}

// freePort returns a TCP port that was free on addr a moment ago.
func freePort(addr string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, fmt.Errorf("pick master port on %s: %w", addr, err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, fmt.Errorf("pick master port on %s: %w", addr, err)
	}
	return port, nil
}
