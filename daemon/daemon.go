// Package daemon is scavd, the node agent: it runs (or joins) the NATS server
// and its JetStream store, serves the scav.api.* request/reply API for
// scavctl, supervises the jobs launched on this node, and ingests the workers'
// step telemetry from a unix socket.
//
// A Daemon's life:
//
//	Start: state dir -> NATS (embedded or external) -> store -> ingest socket
//	       -> API -> settle the previous daemon's jobs (restart.go)
//	       -> discovery file
//	Close: remove discovery file -> stop jobs (SIGTERM, grace, SIGKILL)
//	       -> close ingest -> drain NATS -> shut the embedded server down
package daemon

import (
	"context"
	"encoding/json"
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
	"github.com/scavenger-ml/scavenger/daemon/sdnotify"
	"github.com/scavenger-ml/scavenger/launchers/local"
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
	cfg    Config
	log    *zap.Logger
	ns     *server.Server
	nc     *nats.Conn
	store  *telemetry.Store
	ingest *Ingest
	sup    *supervisor
	allocs *allocations
	reaper *local.Reaper
	lock   *os.File
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
		cfg.StateDir = DefaultStateDir()
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
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
	if d.ingest, err = ListenIngest(cfg.Socket, d.nc, log.Named("ingest")); err != nil {
		return nil, err
	}
	// Control messages for any job reach the workers connected here.
	if _, err := d.nc.Subscribe(telemetry.AllControl, func(m *nats.Msg) {
		c, err := telemetry.DecodeControl(m.Data)
		if err != nil {
			log.Warn("control message", zap.String("subject", m.Subject), zap.Error(err))
			return
		}
		n := d.ingest.Send(c)
		log.Debug("control sent", zap.String("job", c.Job), zap.String("kind", c.Kind), zap.Int("workers", n))
	}); err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", telemetry.AllControl, err)
	}
	pyPath, err := extractPythonClient(filepath.Join(cfg.StateDir, "python"))
	if err != nil {
		return nil, err
	}
	launcher := cfg.Launcher
	if launcher == nil {
		// Workers' orphans are re-parented to us and reaped, since PID 1 may not reap them.
		if d.reaper, err = local.StartReaper(context.WithoutCancel(ctx), log); err != nil {
			return nil, err
		}
		launcher = local.New(local.Options{Logger: log, KillOnParentDeath: cfg.Standalone, Reaper: d.reaper})
	}
	d.sup = &supervisor{
		log: log.Named("jobs"), launcher: launcher, pub: d.nc, nc: d.nc, kv: d.store.Jobs, node: cfg.Node,
		socket: d.ingest.Path(), ckptRoot: filepath.Join(cfg.StateDir, "checkpoints"), pyPath: pyPath,
		jobs: map[string]*running{},
	}
	d.allocs = &allocations{kv: d.store.Allocations, node: cfg.Node, stop: func(id string) { _, _ = d.sup.stopJob(id, 0) }}
	d.sup.allocs = d.allocs
	if !cfg.Standalone {
		d.sup.restartDir, d.sup.resumeJobs = filepath.Join(cfg.StateDir, restartDir), cfg.ResumeJobs
	}
	if err := d.serveAPI(d.nc); err != nil {
		return nil, err
	}
	if err := d.startNode(ctx); err != nil {
		return nil, err
	}
	if err := d.nc.FlushTimeout(5 * time.Second); err != nil {
		return nil, fmt.Errorf("flush api subscriptions: %w", err)
	}
	d.sup.recoverJobs(ctx)
	if err := writeDiscovery(cfg.StateDir, d.info()); err != nil {
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
	jobs := d.sup.active()
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

// Ingest returns the telemetry socket's counters.
func (d *Daemon) IngestStats() IngestStats { return d.ingest.Stats() }

// Active lists the jobs still running on this daemon.
func (d *Daemon) Active() []string { return d.sup.active() }

// Wait blocks until no job runs on this daemon or ctx is done.
func (d *Daemon) Wait(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for len(d.sup.active()) > 0 {
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
		removeDiscovery(d.cfg.StateDir, os.Getpid())
	}
	errs = append(errs, d.stopNode())
	if d.sup != nil {
		d.sup.close()
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
	if d.reaper != nil {
		d.reaper.Stop()
	}
	if d.lock != nil {
		d.lock.Close()
	}
	return errors.Join(errs...)
}

func (d *Daemon) info() Info {
	return Info{
		Node: d.cfg.Node, Version: api.Version, PID: os.Getpid(), Standalone: d.cfg.Standalone,
		Socket: d.ingest.Path(), NATS: d.URL(), Active: d.sup.active(), Metrics: d.MetricsAddr(),
	}
}

// getJob reads one job record.
func getJob(ctx context.Context, kv jetstream.KeyValue, id string) (Job, error) {
	if !telemetry.ValidJobID(id) {
		return Job{}, fmt.Errorf("%w: %q is not a job id", ErrBadRequest, id)
	}
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Job{}, fmt.Errorf("job %s: %w", id, ErrNoJob)
	}
	if err != nil {
		return Job{}, fmt.Errorf("read job %s: %w", id, err)
	}
	var j Job
	if err := json.Unmarshal(e.Value(), &j); err != nil {
		return Job{}, fmt.Errorf("decode job %s: %w", id, err)
	}
	return j, nil
}

// listJobs reads every job record, oldest first.
func listJobs(ctx context.Context, kv jetstream.KeyValue) ([]Job, error) {
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	jobs := []Job{}
	for k := range keys.Keys() {
		j, err := getJob(ctx, kv, k)
		if err != nil {
			continue // deleted between list and get
		}
		jobs = append(jobs, j)
	}
	sortJobs(jobs)
	return jobs, nil
}
