// Package cloudvm is the launcher that acquires machines for each job: an
// elastic pool of instances of the job's machine type, on demand or spot,
// from a cloud behind a small provider interface (launchers/cloudvm/provider;
// the local namespace cloud, localcloud, and EC2, aws). Its workers run on
// the instances over SSH: each attempt is an attempt of the ssh launcher
// (launchers/ssh) over the pool's instances.
//
// # The pool
//
// An attempt at K workers of type T needs ⌈K/slots(T)⌉ instances (one for a
// command that launches its own workers). A relaunch keeps the instances
// it can use, provisions only the missing ones and releases the surplus
// (planPool); a type change provisions the new type first and releases the
// old once the attempt has started on the new one, unless that would hold
// more than Options.PoolLimit instances. Each instance boots with the
// pool's SSH key and a host key the pool made (provider.Boot), so its host
// key is verified at every connection without ever trusting it on first
// use.
//
// # Provisioning
//
// Every instance carries tags naming the owner (this scavd), the job and
// the attempt; a request carries an idempotency token, so that a retried
// call never doubles the pool, and before each attempt the pool adopts the
// instances of its job that a lost answer left unknown. Throttling and the
// provider's internal errors are retried with back-off; a capacity error
// blocklists the (type, zone, market) for Options.Blocklist and fails over
// to the next zone, then, for spot, to on demand (the fallback). A type
// that cannot be had anywhere fails the start: the daemon goes back to the
// configuration it came from, and the launcher's offers (Capabilities) no
// longer list what is blocklisted, so the job's optimizer chooses among
// what can be had.
//
// # Pre-emption
//
// For each spot instance the launcher polls the provider's metadata
// service from the instance itself, through its SSH connection
// (launchers/cloudvm/notice). A notice dooms the instance, blocklists its
// (type, zone, spot) and sends the workers the pre-emption signal of the
// worker contract (SCAV_PREEMPT_SIGNAL, USR1): the python client tells the
// daemon, which checkpoints the job within the notice and re-chooses its
// configuration. The next attempt leaves the doomed instance out, and it is
// terminated as soon as no attempt runs on it.
//
// # No instance outlives its job
//
// Every instance carries a watchdog (provider.WatchdogScript) that ends it
// once no SSH connection of its scavd has been open for
// Options.OrphanTimeout: the launcher keeps one open to each instance, so
// the instances of a scavd gone for good end themselves.
//
// The daemon releases a job's instances when the job ends (Release, of
// plugins.Biller). A pool idle for Options.IdleRelease is released too (a
// daemon that reaches the launcher over gRPC does not call Release). A
// reaper lists the owner's instances every Options.ReapInterval and
// terminates those of jobs without a pool here. After a daemon crash the
// next daemon reattaches to its jobs' attempts (Recover, recover.go): the
// instances and the workers outlived it — the ranks run detached from
// their SSH sessions (launchers/ssh Options.Detach) — so the pool is
// rebuilt from the state directory and the job goes on where it was; it
// terminates the instances of the jobs it cannot reattach to
// (StopOrphaned), and the reaper the rest.
//
// # Billing
//
// Each instance is billed from its launch to its termination at the price
// it was bought at, with the provider's granularity and minimum; Charges
// lists a job's, kept in the state directory so that they survive a
// restart.
//
// Lifecycle of an instance:
//
//	provisioned ──► ready (sshd answers, host key checked) ──► in an attempt ◄──► idle
//	     │                                                        │ notice       │
//	     └── lost answer: adopted by tag                           ▼              │
//	                                                           doomed ──► terminated ◄┘
//	                                             (surplus, other type, job ended, idle too long, reaped)
package cloudvm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/plugins"
)

// Defaults of Options.
const (
	DefaultMaxInstances   = 8
	DefaultBlocklist      = 10 * time.Minute
	DefaultIdleRelease    = 5 * time.Minute
	DefaultReapInterval   = 30 * time.Second
	DefaultAdoptGrace     = time.Minute
	DefaultReadyTimeout   = 5 * time.Minute
	DefaultPreemptSignal  = "USR1"
	DefaultRetries        = 6
	DefaultRetryBase      = 500 * time.Millisecond
	DefaultPriceCacheTime = time.Minute
)

// Options configure a Launcher.
type Options struct {
	// Logger is required; the launcher names its logger "cloudvm".
	Logger *zap.Logger
	// Provider is the cloud; required.
	Provider provider.Provider
	// StateDir keeps the pools' keys and the jobs' charges; required.
	StateDir string
	// Types are the instance types jobs may use, the first being the type
	// of a configuration that names none (default: every type of the provider).
	Types []string
	// Zones are the zones to use, in failover order (default: each type's,
	// as the provider lists them).
	Zones []string
	// Market is the market of a configuration that names none (default on demand).
	Market string
	// Owner is the value of the owner tag: the launcher terminates the
	// owner's instances that belong to no job it runs (default: the host
	// name). Two launchers must not share an owner.
	Owner string
	// MaxInstances bounds the instances of one attempt (default
	// DefaultMaxInstances); PoolLimit those a pool holds at once, old and
	// new during a type change (default twice MaxInstances).
	MaxInstances, PoolLimit int
	// Blocklist is how long a (type, zone, market) that had no capacity or
	// was reclaimed is avoided (default DefaultBlocklist).
	Blocklist time.Duration
	// NoFallback keeps spot requests from falling back to on demand.
	NoFallback bool
	// IdleRelease releases a pool no attempt has used for this long
	// (default DefaultIdleRelease).
	IdleRelease time.Duration
	// ReapInterval is how often the reaper looks (default
	// DefaultReapInterval); AdoptGrace how long after the start it leaves
	// unknown instances of the owner alone, for the daemon to claim
	// (default DefaultAdoptGrace).
	ReapInterval, AdoptGrace time.Duration
	// ReadyTimeout bounds waiting for new instances to answer SSH.
	ReadyTimeout time.Duration
	// NoticeInterval is how often each spot instance's notices are polled
	// (default notice.DefaultInterval); Rebalance also acts on rebalance
	// recommendations, not only on interruption notices.
	NoticeInterval time.Duration
	Rebalance      bool
	// PreemptSignal is the workers' pre-emption signal (default USR1).
	PreemptSignal string
	// OrphanTimeout is how long an instance outlives the last SSH
	// connection of this launcher (default provider.DefaultOrphanTimeout;
	// see provider.WatchdogScript): the launcher keeps one open to each
	// instance of its pools.
	OrphanTimeout time.Duration
	// Retries and RetryBase bound the retries of a throttled or failed
	// provider call (exponential back-off from RetryBase).
	Retries   int
	RetryBase time.Duration
	// User is the login user on the instances (default root).
	User string
	// Grace is how long the peers of a failed rank get (see ssh.Options).
	Grace time.Duration
	// NoTelemetryForward gives the workers the daemon's socket path as it
	// is (instances that share the daemon's filesystem) instead of
	// forwarding it over SSH (see launchers/ssh).
	NoTelemetryForward bool
}

// Launcher starts attempts on pools of cloud instances. It implements
// plugins.Launcher and plugins.Biller.
type Launcher struct {
	o       Options
	log     *zap.Logger
	started time.Time
	nonce   string // makes its idempotency tokens its own
	types   map[string]provider.InstanceType
	preempt syscall.Signal // Options.PreemptSignal

	ctx    context.Context // the launcher's life: watchers, attempts' waits, the reaper
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	pools  map[string]*pool // by job
	block  blocklist
	prices priceCache

	closeOnce sync.Once
}

var (
	_ plugins.Launcher = (*Launcher)(nil)
	_ plugins.Biller   = (*Launcher)(nil)
)

// New checks opts against the provider's types and starts the reaper.
// Close releases every pool and stops it.
func New(ctx context.Context, o Options) (*Launcher, error) {
	if o.Logger == nil || o.Provider == nil || o.StateDir == "" {
		return nil, errors.New("new cloudvm launcher: Options.Logger, Provider and StateDir are required")
	}
	types, err := o.Provider.Types(ctx)
	if err != nil {
		return nil, fmt.Errorf("new cloudvm launcher: types of provider %s: %w", o.Provider.Name(), err)
	}
	l := &Launcher{o: o, log: o.Logger.Named("cloudvm"), started: time.Now(), nonce: rand.Text(), types: map[string]provider.InstanceType{},
		pools: map[string]*pool{}, block: blocklist{}}
	for _, t := range types {
		l.types[t.Name] = t
	}
	if err := l.defaults(); err != nil {
		return nil, fmt.Errorf("new cloudvm launcher: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(o.StateDir, "pools"), 0o700); err != nil {
		return nil, fmt.Errorf("new cloudvm launcher: %w", err)
	}
	l.ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.wg.Go(l.reaper)
	return l, nil
}

// defaults fills in the options' defaults and checks the types, the market
// and the pre-emption signal.
func (l *Launcher) defaults() error {
	o := &l.o
	if len(o.Types) == 0 {
		for name := range l.types {
			o.Types = append(o.Types, name)
		}
		slices.Sort(o.Types)
	}
	for _, t := range o.Types {
		if _, ok := l.types[t]; !ok {
			return fmt.Errorf("type %q: provider %s has no such type", t, o.Provider.Name())
		}
	}
	if o.Market == "" {
		o.Market = provider.OnDemand
	}
	if o.Market != provider.OnDemand && o.Market != provider.Spot {
		return fmt.Errorf("market %q: use %s or %s", o.Market, provider.OnDemand, provider.Spot)
	}
	if o.Owner == "" {
		o.Owner, _ = os.Hostname()
	}
	setDefault(&o.MaxInstances, DefaultMaxInstances)
	setDefault(&o.PoolLimit, 2*o.MaxInstances)
	setDefault(&o.Retries, DefaultRetries)
	setDefault(&o.Blocklist, DefaultBlocklist)
	setDefault(&o.IdleRelease, DefaultIdleRelease)
	setDefault(&o.ReapInterval, DefaultReapInterval)
	setDefault(&o.AdoptGrace, DefaultAdoptGrace)
	setDefault(&o.ReadyTimeout, DefaultReadyTimeout)
	setDefault(&o.RetryBase, DefaultRetryBase)
	setDefault(&o.OrphanTimeout, provider.DefaultOrphanTimeout)
	if o.PreemptSignal == "" {
		o.PreemptSignal = DefaultPreemptSignal
	}
	sig, err := parseSignal(o.PreemptSignal)
	if err != nil {
		return err
	}
	l.preempt = sig
	if o.User == "" {
		o.User = "root"
	}
	return nil
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Name returns "cloudvm".
func (l *Launcher) Name() string { return "cloudvm" }

// Close releases every pool (a daemon closes its launcher once its jobs
// have stopped) and stops the reaper and the watchers. It is idempotent.
func (l *Launcher) Close() error {
	var err error
	l.closeOnce.Do(func() {
		l.mu.Lock()
		jobs := make([]string, 0, len(l.pools))
		for job := range l.pools {
			jobs = append(jobs, job)
		}
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), time.Minute)
		defer cancel()
		for _, job := range jobs {
			err = errors.Join(err, l.Release(ctx, job))
		}
		l.cancel()
		l.wg.Wait()
	})
	return err
}

// Capabilities reports the most workers an attempt can have, the types
// jobs may use and their offers now: slots, the on-demand price, and the
// cheapest spot price among the zones not blocklisted (0: none).
func (l *Launcher) Capabilities(ctx context.Context) (plugins.Capabilities, error) {
	offers, err := l.offers(ctx)
	if err != nil {
		return plugins.Capabilities{}, fmt.Errorf("cloudvm capabilities: %w", err)
	}
	c := plugins.Capabilities{MachineTypes: slices.Clone(l.o.Types), Offers: offers}
	for _, o := range offers {
		c.MaxWorkers = max(c.MaxWorkers, o.Slots*l.o.MaxInstances)
	}
	return c, nil
}

// zones are the zones to try for type t, in order.
func (l *Launcher) zones(t provider.InstanceType) []string {
	if len(l.o.Zones) == 0 {
		return t.Zones
	}
	var out []string
	for _, z := range l.o.Zones {
		if slices.Contains(t.Zones, z) {
			out = append(out, z)
		}
	}
	return out
}
