// Package daemon is scavd, the node agent, as wiring: it runs (or joins) the
// NATS server and its JetStream store, takes the state directory's lock,
// serves the scav.api.* request/reply API (api/) from the job registry
// (daemon/jobs), the telemetry socket (daemon/ingest) and the allocation
// records (daemon/allocs), samples the node and serves /metrics, and talks
// to systemd. What each part does lives in its package.
//
// A Daemon's life:
//
//	Start: state dir + lock -> check the store (storehealth.go) -> NATS
//	       (embedded or external) -> store -> restore job records
//	       -> ingest socket + control relay -> launcher -> job index, step
//	       digests -> job registry -> API -> node sampler, /metrics
//	       -> settle the previous daemon's jobs (jobs.Registry.Recover)
//	       -> retention of finished jobs -> discovery file
//	Close: remove discovery file -> node sampler, /metrics, retention
//	       -> stop the jobs (checkpoint within the grace, then SIGKILL;
//	       bounded) -> close ingest -> job index -> drain NATS -> shut the
//	       embedded server down -> release the launcher
package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/aggregates"
	"github.com/scavenger-ml/scavenger/daemon/allocs"
	"github.com/scavenger-ml/scavenger/daemon/apiserver"
	"github.com/scavenger-ml/scavenger/daemon/dashboard"
	"github.com/scavenger-ml/scavenger/daemon/ingest"
	"github.com/scavenger-ml/scavenger/daemon/jobindex"
	"github.com/scavenger-ml/scavenger/daemon/jobs"
	"github.com/scavenger-ml/scavenger/daemon/models"
	"github.com/scavenger-ml/scavenger/launchers/builtin"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry/history"
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
	// Retention bounds the step and output history; its byte limits not
	// set follow the state disk's size at start (storesize.go).
	// OutputPerUser bounds one user's output in it, OutputReadPerUser how
	// fast it is read (jobs.Options; by default, only on a daemon that
	// serves every user).
	Retention                        history.Retention
	OutputPerUser, OutputReadPerUser int64
	// StoreMaxBytes, when positive, is the streams' total byte limit
	// instead of half the state disk's space.
	StoreMaxBytes int64
	// StopGrace bounds how long a stopping daemon gives its jobs to
	// checkpoint and exit (each at most its own grace) before it kills them
	// (default DefaultStopGrace): SIGTERM stops scavd within it, and
	// killTimeout more at worst.
	StopGrace time.Duration
	// JobRetention bounds the jobs a node keeps (job_retention,
	// job_history).
	JobRetention jobs.Retention
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
	// Notify tells systemd (Type=notify), through $NOTIFY_SOCKET, that Run
	// is ready, its status and that it is stopping: set for a service.
	Notify bool
	// Watchdog, when positive, is how often Run pings systemd's watchdog
	// through Notify (half of WatchdogSec=, from go-systemd's SdWatchdogEnabled).
	Watchdog time.Duration
	// ResumeJobs makes the jobs that this daemon stops when it stops resume
	// from their checkpoints when the next daemon starts on the same state
	// directory (see restart.go). Ignored for a standalone daemon.
	ResumeJobs bool
	// NATSKey is the nkey seed file the daemon authenticates to NATS with
	// (default <StateDir>/nats.nk, made on the first start). The daemons of
	// one cluster, or of one external server, share it.
	NATSKey string
	// NATSTLSCert and NATSTLSKey serve the embedded server's client port
	// with TLS (required off loopback); NATSTLSCA verifies an external or
	// clustered server.
	NATSTLSCert, NATSTLSKey, NATSTLSCA string
	// APIListen, when set, also serves the API on TCP, with the bearer
	// tokens of APITokens and (required off loopback) TLS.
	APIListen, APITLSCert, APITLSKey, APITokens string
	// APILimits bound what the API's listeners keep open (zero values:
	// apiserver.DefaultLimits).
	APILimits apiserver.Limits
	// MetricsWebConfig is a Prometheus exporter-toolkit web config (TLS,
	// basic auth) for /metrics; required off loopback.
	MetricsWebConfig string
	// MetricsPerJob says whether /metrics has the series that name jobs
	// (ids, names, loss, steps): "on", "off", or "auto" (default): only on
	// a daemon that serves its own user alone. A root daemon's /metrics is
	// anyone's who can reach it; turn them on there with a web config that
	// asks for a password.
	MetricsPerJob string
	// DashboardListen is the address of the dashboard's login links
	// (daemon/dashboard; empty: none), opened at the first link.
	DashboardListen string
	// Cluster, when its Listen is set, joins the embedded server to the
	// other nodes' (see Cluster); Retention.Replicas sets the copies.
	Cluster Cluster
	// Telemetry bounds the telemetry socket per user and per job (zero
	// fields: ingest.DefaultLimits).
	Telemetry ingest.Limits

	// asBefore starts the daemon as it was before it checked and repaired
	// its store (the fault suite's "before" of the store's damage).
	asBefore bool
}

// DefaultStopGrace is Config.StopGrace unless set: under the shipped
// unit's TimeoutStopSec (5 minutes) with the kill's time to spare.
const DefaultStopGrace = 4 * time.Minute

// Daemon is a running scavd.
type Daemon struct {
	cfg Config
	log *zap.Logger
	// root is the daemon's own context: the jobs live as long as it does.
	root       context.Context
	cancelRoot context.CancelFunc
	ns         *server.Server
	nc         *nats.Conn
	store      *history.Store
	models     *models.Store
	ingest     *ingest.Server
	index      *jobindex.Index
	digests    *aggregates.Store
	jobs       *jobs.Registry
	allocs     *allocs.Store
	api        *apiserver.Server
	dash       *dashboard.Server
	// releaseLauncher releases the launcher the daemon opened itself;
	// launcher is its name.
	releaseLauncher func()
	launcher        string
	launcherImpl    plugins.Launcher
	lock            *os.File
	// node samples the node's GPUs and host; metrics serves /metrics.
	node      *nodeSampler
	closeGPUs func() error
	metrics   *metricsServer
	// stopRelease ends the release of free heap memory (memory.go).
	stopRelease func()
	// retention is the store's, its byte limits sized at start.
	retention history.Retention
	// health is what the daemon found of its store at start.
	health *storeHealth
	// disk watches the state disk (nil when the daemon embeds no server);
	// stopDisk ends its watch.
	disk     *diskWatch
	stopDisk func()
	// stopSweep ends the retention of finished jobs (retention.go).
	stopSweep func()

	closeOnce sync.Once
	closeErr  error
}

// Start brings a daemon up. Close must be called to stop it.
func Start(ctx context.Context, cfg Config, log *zap.Logger) (_ *Daemon, err error) {
	closeInherited()
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
	if err := makeStateDir(cfg.StateDir, cfg.Standalone); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, log: log, health: &storeHealth{}}
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
	if err := d.startNATS(ctx); err != nil {
		return nil, err
	}
	if err := d.startJobs(ctx); err != nil {
		return nil, err
	}
	if d.api, err = apiserver.Listen(d.root, apiserver.Options{
		Log: log.Named("api"), Jobs: d.jobs, Allocations: d.allocs, Models: d.models, Index: d.index, Digests: d.digests, JS: d.store.JS, NC: d.nc, Node: cfg.Node,
		Info: d.info, Ingest: d.ingest.Stats, Offers: d.offers, Socket: filepath.Join(cfg.StateDir, api.SocketName), Shared: d.shared(),
		Listen: cfg.APIListen, TLSCert: cfg.APITLSCert, TLSKey: cfg.APITLSKey, Tokens: cfg.APITokens, Limits: cfg.APILimits, UI: d.newDashboard(),
	}); err != nil {
		return nil, err
	}
	if err := d.startNode(ctx); err != nil {
		return nil, err
	}
	d.startDiskWatch()
	d.jobs.Recover(ctx)
	d.startSweep()
	if err := writeDiscovery(cfg.StateDir, d.info()); err != nil {
		return nil, err
	}
	log.Info("scavd ready", zap.String("api", d.APISocket()), zap.String("nats", d.URL()), zap.String("socket", d.ingest.Path()),
		zap.String("state", cfg.StateDir), zap.Bool("standalone", cfg.Standalone))
	return d, nil
}

// startJobs brings up the telemetry socket, the control relay, the
// launcher, the allocation records, the job index, the step digests and the
// job registry.
func (d *Daemon) startJobs(ctx context.Context) error {
	cfg, log := d.cfg, d.log
	key, err := ingest.LoadKey(filepath.Join(cfg.StateDir, "telemetry.key"))
	if err != nil {
		return err
	}
	steps := ingest.StreamPublisher{Ctx: d.root, JS: d.store.JS, Patience: ingest.DefaultPatience, Hold: d.disk.holding}
	var registry atomic.Pointer[jobs.Registry] // made below: workers reconnecting meanwhile wait
	if d.ingest, err = ingest.Listen(cfg.Socket, d.nc, ingest.Options{Log: log.Named("ingest"), Verify: key.Verify, Shared: d.shared(),
		Steps: steps, Attempts: liveAttempts(&registry), Stored: lastStoredSteps(d.store.JS), Limits: cfg.Telemetry}); err != nil {
		return err
	}
	if _, err := d.ingest.Relay(d.nc); err != nil {
		return err
	}
	pyPath, err := extractPythonClient(filepath.Join(cfg.StateDir, "python"))
	if err != nil {
		return err
	}
	launcher := cfg.Launcher
	if launcher == nil {
		if launcher, d.releaseLauncher, err = builtin.Open(d.root, "local", builtin.Options{KillOnParentDeath: cfg.Standalone}, log); err != nil {
			return err
		}
	}
	d.launcher, d.launcherImpl = launcher.Name(), launcher
	d.allocs = &allocs.Store{KV: d.store.Allocations, Node: cfg.Node, Stop: func(id string) { _, _ = d.jobs.Stop(id, 0) }}
	if d.index, err = jobindex.Open(ctx, d.store.JobIndex, d.store.Jobs, log.Named("index")); err != nil {
		return err
	}
	d.digests = &aggregates.Store{JS: d.store.JS, KV: d.store.StepDigests, Log: log.Named("digests")}
	o := jobs.Options{
		Log: log.Named("jobs"), Launcher: launcher, NC: d.nc, KV: d.store.Jobs, Index: d.index, Digests: d.digests, Node: cfg.Node,
		Socket: d.ingest.Path(), CheckpointRoot: filepath.Join(cfg.StateDir, "checkpoints"), PythonPath: pyPath,
		Allocations: d.allocs, Token: key.Token, Progress: d.ingest.Progress, Decoded: d.ingest.Decoded, Models: d.models, OutputPerUser: cfg.OutputPerUser,
		OutputReadPerUser: d.outputReadPerUser(),
	}
	if !cfg.Standalone {
		o.RestartDir, o.ResumeJobs = filepath.Join(cfg.StateDir, jobs.RestartSubdir), cfg.ResumeJobs
		o.EnvDir = filepath.Join(cfg.StateDir, jobs.EnvSubdir)
	}
	d.jobs = jobs.New(d.root, o)
	registry.Store(d.jobs)
	d.health.unreadable = d.jobs.Unreadable
	return nil
}

// offers is what the daemon's launcher offers now (the API's offers verb).
func (d *Daemon) offers(ctx context.Context) (api.Offers, error) {
	caps, err := d.launcherImpl.Capabilities(ctx)
	if err != nil {
		return api.Offers{}, err
	}
	return api.Offers{Launcher: d.launcher, MaxWorkers: caps.MaxWorkers, Offers: caps.Offers}, nil
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
	d.notifyStopping(len(jobs))
	return d.Close()
}

// SetRetention changes, live, how long the streams keep step records
// (r.StepMaxAge; their byte limits stay as sized at start).
func (d *Daemon) SetRetention(ctx context.Context, r history.Retention) error {
	next := d.retention
	next.StepMaxAge = r.StepMaxAge
	if _, err := history.OpenStore(ctx, d.store.JS, next); err != nil {
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

// APISocket is the API's unix socket (what clients Dial).
func (d *Daemon) APISocket() string { return filepath.Join(d.cfg.StateDir, api.SocketName) }

// APIAddr is the API's TCP address ("" when it serves none).
func (d *Daemon) APIAddr() string {
	if d.api == nil {
		return ""
	}
	return d.api.Addr()
}

// Socket is the telemetry socket's path.
func (d *Daemon) Socket() string { return d.ingest.Path() }

// IngestStats returns the telemetry socket's counters.
func (d *Daemon) IngestStats() api.IngestStats { return d.ingest.Stats() }

// Active lists the jobs still running on this daemon.
func (d *Daemon) Active() []string { return d.jobs.Active() }

func (d *Daemon) info() api.Info {
	return api.Info{
		Node: d.cfg.Node, Version: api.Version, PID: os.Getpid(), Standalone: d.cfg.Standalone,
		Socket: d.ingest.Path(), NATS: d.URL(), Active: d.jobs.Active(), Metrics: d.MetricsAddr(),
		API: d.APISocket(), APIAddr: d.APIAddr(), Launcher: d.launcher, StateDisk: d.disk.status(),
		CheckpointDisks: d.disk.checkpoints(), Store: d.health.lines(),
	}
}
