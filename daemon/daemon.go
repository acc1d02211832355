// Package daemon is scavd, the node agent, as wiring: it runs (or joins) the
// NATS server and its JetStream store, takes the state directory's lock,
// serves the scav.api.* request/reply API (api/) from the job registry
// (daemon/jobs), the telemetry socket (daemon/ingest) and the allocation
// records (daemon/allocs), samples the node and serves /metrics, and talks
// to systemd. What each part does lives in its package.
//
// A Daemon's life:
//
//	Start: state dir + lock -> NATS (embedded or external) -> store
//	       -> ingest socket + control relay -> launcher -> job registry
//	       -> API -> node sampler, /metrics -> settle the previous daemon's
//	       jobs (jobs.Registry.Recover) -> discovery file
//	Close: remove discovery file -> node sampler, /metrics -> stop the jobs
//	       (checkpoint within the grace, then SIGKILL; bounded)
//	       -> close ingest -> drain NATS -> shut the embedded server down
//	       -> release the launcher
package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/allocs"
	"github.com/scavenger-ml/scavenger/daemon/ingest"
	"github.com/scavenger-ml/scavenger/daemon/jobs"
	"github.com/scavenger-ml/scavenger/daemon/sdnotify"
	"github.com/scavenger-ml/scavenger/launchers/builtin"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// Config is what a daemon needs to start. Zero values take defaults.
type Config struct {
	// StateDir holds the JetStream store, the socket, checkpoints and the
	// discovery file. Default: DefaultStateDir().
	StateDir string
	// NATSURL, when set, joins that NATS server instead of embedding one.
	NATSURL string
	// Listen is the embedded server's address (default DefaultListen; port 0 picks one).
	Listen string
	// Socket is the telemetry socket (default <StateDir>/scavd.sock).
	Socket string
	// Node names this node (default the host name).
	Node string
	// Retention bounds the step and output history.
	Retention telemetry.Retention
	// Standalone marks a daemon that scavctl embeds for one run: its workers
	// die with the scavctl process, and it tells others through the discovery file.
	Standalone bool
	// Launcher starts the workers (default: the built-in local launcher, with
	// an orphan reaper).
	Launcher plugins.Launcher
	// NodeSampleEvery is how often the node's GPUs and host are sampled and
	// published on scav.node.<node>.{gpu,host} (default
	// DefaultNodeSampleEvery; negative: never).
	NodeSampleEvery time.Duration
	// GPUSource says how GPUs are read: auto (default), nvml, nvidia-smi or none.
	GPUSource string
	// MetricsListen, when set, is the address of the Prometheus /metrics
	// endpoint ("127.0.0.1:9433"; port 0 picks one, see Daemon.MetricsAddr).
	MetricsListen string
	// Notify, when set, tells systemd (Type=notify) that Run is ready, its
	// status and that it is stopping: sdnotify.FromEnv() for a service.
	Notify *sdnotify.Notifier
	// Watchdog, when positive, is how often Run pings systemd's watchdog
	// through Notify (half of WatchdogSec=: sdnotify.WatchdogInterval()).
	Watchdog time.Duration
	// ResumeJobs makes the jobs that this daemon stops when it stops resume
	// from their checkpoints when the next daemon starts on the same state
	// directory (see restart.go). Ignored for a standalone daemon.
	ResumeJobs bool
}

// Daemon is a running scavd.
type Daemon struct {
	cfg Config
	log *zap.Logger
	// root is the daemon's own context: the jobs live as long as it does.
	root       context.Context
	cancelRoot context.CancelFunc
	ns         *server.Server
	nc         *nats.Conn
	store      *telemetry.Store
	ingest     *ingest.Server
	jobs       *jobs.Registry
	allocs     *allocs.Store
	// releaseLauncher releases the launcher the daemon opened itself;
	// launcher is its name.
	releaseLauncher func()
	launcher        string
	lock            *os.File
	// node samples the node's GPUs and host; metrics serves /metrics.
	node      *nodeSampler
	closeGPUs func() error
	metrics   *metricsServer

	closeOnce sync.Once
	closeErr  error
}

// Start brings a daemon up. Close must be called to stop it.
func Start(ctx context.Context, cfg Config, log *zap.Logger) (_ *Daemon, err error) {
	if cfg.StateDir == "" {
		cfg.StateDir = api.DefaultStateDir()
	}
	if cfg.Listen == "" {
		cfg.Listen = api.DefaultListen
	}
	if cfg.Socket == "" {
		cfg.Socket = filepath.Join(cfg.StateDir, "scavd.sock")
	}
	if cfg.Node == "" {
		cfg.Node, _ = os.Hostname()
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory %s: %w", cfg.StateDir, err)
	}
	d := &Daemon{cfg: cfg, log: log}
	// The daemon's root: its jobs outlive the context Start was called with.
	d.root, d.cancelRoot = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			d.shutdown() // undo what had started
		}
	}()
	if d.lock, err = lockState(cfg.StateDir); err != nil {
		return nil, err
	}
	if cfg.NATSURL == "" {
		if d.ns, err = startNATS(cfg.Listen, cfg.StateDir, "scavd-"+cfg.Node, log.Named("nats")); err != nil {
			return nil, err
		}
	}
	if d.nc, err = connect(cfg.NATSURL, d.ns, "scavd "+cfg.Node, log.Named("nats")); err != nil {
		return nil, err
	}
	js, err := jetstream.New(d.nc)
	if err != nil {
		return nil, fmt.Errorf("open jetstream: %w", err)
	}
	if d.store, err = telemetry.OpenStore(ctx, js, cfg.Retention); err != nil {
		return nil, err
	}
	if d.ingest, err = ingest.Listen(cfg.Socket, d.nc, log.Named("ingest")); err != nil {
		return nil, err
	}
	if _, err := d.ingest.Relay(d.nc); err != nil {
		return nil, err
	}
	pyPath, err := extractPythonClient(filepath.Join(cfg.StateDir, "python"))
	if err != nil {
		return nil, err
	}
	launcher := cfg.Launcher
	if launcher == nil {
		if launcher, d.releaseLauncher, err = builtin.Open(d.root, "local", builtin.Options{KillOnParentDeath: cfg.Standalone}, log); err != nil {
			return nil, err
		}
	}
	d.launcher = launcher.Name()
	d.allocs = &allocs.Store{KV: d.store.Allocations, Node: cfg.Node, Stop: func(id string) { _, _ = d.jobs.Stop(id, 0) }}
	o := jobs.Options{
		Log: log.Named("jobs"), Launcher: launcher, NC: d.nc, KV: d.store.Jobs, Node: cfg.Node,
		Socket: d.ingest.Path(), CheckpointRoot: filepath.Join(cfg.StateDir, "checkpoints"), PythonPath: pyPath,
		Allocations: d.allocs,
	}
	if !cfg.Standalone {
		o.RestartDir, o.ResumeJobs = filepath.Join(cfg.StateDir, jobs.RestartSubdir), cfg.ResumeJobs
	}
	d.jobs = jobs.New(d.root, o)
	if err := d.serveAPI(d.nc); err != nil {
		return nil, err
	}
	if err := d.startNode(ctx); err != nil {
		return nil, err
	}
	if err := d.nc.FlushTimeout(5 * time.Second); err != nil {
		return nil, fmt.Errorf("flush api subscriptions: %w", err)
	}
	d.jobs.Recover(ctx)
	if err := api.WriteDiscovery(cfg.StateDir, d.info()); err != nil {
		return nil, err
	}
	log.Info("scavd ready", zap.String("nats", d.URL()), zap.String("socket", d.ingest.Path()),
		zap.String("state", cfg.StateDir), zap.Bool("standalone", cfg.Standalone))
	return d, nil
}

// Run starts a daemon and serves until ctx is done, then stops it.
func Run(ctx context.Context, cfg Config, log *zap.Logger) error {
	d, err := Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	return d.Serve(ctx)
}

// Serve serves until ctx is done, then stops the daemon. With Config.Notify
// it tells systemd that it is ready (everything Start brings up serves),
// what it is doing, and that it is stopping.
func (d *Daemon) Serve(ctx context.Context) error {
	notifyCtx, stopNotify := context.WithCancel(ctx)
	notified := make(chan struct{})
	go func() {
		defer close(notified)
		d.notifyService(notifyCtx, d.cfg.Notify, d.cfg.Watchdog, d.log.Named("systemd"))
	}()
	<-ctx.Done()
	stopNotify()
	<-notified
	jobs := d.jobs.Active()
	d.log.Info("scavd stopping", zap.Strings("jobs", jobs))
	if err := d.cfg.Notify.Notify(sdnotify.Stopping, sdnotify.Status(fmt.Sprintf("stopping %d jobs", len(jobs)))); err != nil {
		d.log.Warn("notify systemd", zap.Error(err))
	}
	return d.Close()
}

// SetRetention changes, live, how much history the streams keep.
func (d *Daemon) SetRetention(ctx context.Context, r telemetry.Retention) error {
	if _, err := telemetry.OpenStore(ctx, d.store.JS, r); err != nil {
		return fmt.Errorf("set retention: %w", err)
	}
	return nil
}

// URL is the NATS URL clients use to reach this daemon.
func (d *Daemon) URL() string {
	if d.ns != nil {
		return d.ns.ClientURL()
	}
	return d.nc.ConnectedUrl()
}

// Socket is the telemetry socket's path.
func (d *Daemon) Socket() string { return d.ingest.Path() }

// IngestStats returns the telemetry socket's counters.
func (d *Daemon) IngestStats() api.IngestStats { return d.ingest.Stats() }

// Active lists the jobs still running on this daemon.
func (d *Daemon) Active() []string { return d.jobs.Active() }

// Wait blocks until no job runs on this daemon or ctx is done.
func (d *Daemon) Wait(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for len(d.jobs.Active()) > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// Close stops every job (each with its grace), the ingest socket, the NATS
// connection and the embedded server. It is idempotent.
func (d *Daemon) Close() error {
	d.closeOnce.Do(func() { d.closeErr = d.shutdown() })
	return d.closeErr
}

func (d *Daemon) shutdown() error {
	var errs []error
	if d.lock != nil {
		api.RemoveDiscovery(d.cfg.StateDir, os.Getpid())
	}
	errs = append(errs, d.stopNode())
	if d.jobs != nil {
		d.jobs.Close(d.root)
	}
	if d.ingest != nil {
		d.ingest.Close()
	}
	if d.nc != nil {
		if err := d.nc.FlushTimeout(5 * time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, fmt.Errorf("flush nats: %w", err))
		}
		d.nc.Close()
	}
	if d.ns != nil {
		d.ns.Shutdown()
		d.ns.WaitForShutdown()
	}
	if d.releaseLauncher != nil {
		d.releaseLauncher()
	}
	if d.cancelRoot != nil {
		d.cancelRoot()
	}
	if d.lock != nil {
		d.lock.Close()
	}
	return errors.Join(errs...)
}

func (d *Daemon) info() api.Info {
	return api.Info{
		Node: d.cfg.Node, Version: api.Version, PID: os.Getpid(), Standalone: d.cfg.Standalone,
		Socket: d.ingest.Path(), NATS: d.URL(), Active: d.jobs.Active(), Metrics: d.MetricsAddr(), Launcher: d.launcher,
	}
}
