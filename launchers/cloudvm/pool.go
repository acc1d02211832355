package cloudvm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap"
	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/plugins"
)

// pool is one job's instances, with the keys they boot with and what they cost.
type pool struct {
	job string
	dir string // keys, known_hosts, charges
	log *zap.Logger

	// start serialises the attempts of the job: one is provisioned at a time.
	start sync.Mutex

	boot    provider.Boot
	signer  gossh.Signer
	hostKey gossh.PublicKey
	rounds  int // provisioning rounds, for the idempotency tokens

	mu        sync.Mutex
	members   map[string]*member
	cur       *attempt // the attempt running on the pool, if any
	idleSince time.Time
	charges   []plugins.Charge
}

// member is one instance of a pool.
type member struct {
	inst   provider.Instance
	conn   *gossh.Client      // the launcher's own connection: notices
	stop   context.CancelFunc // ends the notice watcher
	doomed atomic.Bool        // a notice came, or it is gone: not reused
}

func (m *member) held() held {
	return held{ID: m.inst.ID, Type: m.inst.Type, Market: m.inst.Market, Launched: m.inst.Launched, Doomed: m.doomed.Load()}
}

// pool returns job's pool, making it (with its keys) the first time; a
// pool recovered after a restart reads the keys it had back (its
// instances boot with them), and without them it cannot be.
func (l *Launcher) pool(job string, recovered bool) (*pool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.pools[job]; p != nil {
		return p, nil
	}
	p := &pool{job: job, dir: filepath.Join(l.o.StateDir, "pools", job), members: map[string]*member{}, idleSince: time.Now(),
		log: l.log.With(zap.String("job", job))}
	keys := p.makeKeys
	if recovered {
		keys = p.loadKeys
	}
	if err := keys(); err != nil {
		return nil, fmt.Errorf("pool of job %s: %w", job, err)
	}
	p.charges, _ = readCharges(p.dir) // a job resumed after a restart goes on adding
	l.pools[job] = p
	return p, nil
}

// makeKeys makes the pool's SSH key pair (the file the ssh launcher logs in
// with) and the host key its instances boot with.
func (p *pool) makeKeys() error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	k, err := provider.NewKeys()
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.keyFile(), k.ClientKey, 0o600); err != nil {
		return fmt.Errorf("write pool key: %w", err)
	}
	if err := os.WriteFile(p.hostKeyFile(), k.Boot.HostKey, 0o600); err != nil {
		return fmt.Errorf("write pool host key: %w", err)
	}
	p.boot, p.signer, p.hostKey = k.Boot, k.Signer, k.HostKey
	return nil
}

// loadKeys reads the pool's keys back (a recovered pool).
func (p *pool) loadKeys() error {
	ck, err := os.ReadFile(p.keyFile())
	if err != nil {
		return fmt.Errorf("%w: its keys are gone: %w", plugins.ErrUnknownHandle, err)
	}
	hk, err := os.ReadFile(p.hostKeyFile())
	if err != nil {
		return fmt.Errorf("%w: its host key is gone: %w", plugins.ErrUnknownHandle, err)
	}
	k, err := provider.ParseKeys(ck, hk)
	if err != nil {
		return err
	}
	p.boot, p.signer, p.hostKey = k.Boot, k.Signer, k.HostKey
	return nil
}

func (p *pool) keyFile() string     { return filepath.Join(p.dir, "id_ed25519") }
func (p *pool) hostKeyFile() string { return filepath.Join(p.dir, "host_ed25519") }
func (p *pool) knownHosts() string  { return filepath.Join(p.dir, "known_hosts") }

// writeKnownHosts lists the instances' addresses with the pool's host key.
func (p *pool) writeKnownHosts(ms []*member) error {
	var addrs []string
	for _, m := range ms {
		addrs = append(addrs, net.JoinHostPort(m.inst.Addr, "22"))
	}
	line := knownhosts.Line(addrs, p.hostKey) + "\n"
	if err := os.WriteFile(p.knownHosts(), []byte(line), 0o600); err != nil {
		return fmt.Errorf("write known_hosts: %w", err)
	}
	return nil
}

// snapshot lists the members in launch order.
func (p *pool) snapshot() []*member {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*member, 0, len(p.members))
	for _, m := range p.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *member) int {
		if c := a.inst.Launched.Compare(b.inst.Launched); c != 0 {
			return c
		}
		return strings.Compare(a.inst.ID, b.inst.ID)
	})
	return out
}

func (p *pool) member(id string) *member {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.members[id]
}

// tags are the tags of the instances of job.
func (l *Launcher) tags(job string, attempt int) map[string]string {
	t := map[string]string{provider.TagOwner: l.o.Owner, provider.TagJob: job, provider.TagName: "scavenger-" + job}
	if attempt > 0 {
		t[provider.TagAttempt] = fmt.Sprint(attempt)
	}
	return t
}

// sync brings the pool in line with the provider: instances of the job it
// does not know (a provisioning whose answer was lost) are adopted, and
// members the provider no longer lists are marked gone.
func (l *Launcher) sync(ctx context.Context, p *pool) error {
	live, err := l.list(ctx, map[string]string{provider.TagOwner: l.o.Owner, provider.TagJob: p.job})
	if err != nil {
		return err
	}
	alive := map[string]bool{}
	for _, in := range live {
		if !in.Alive() {
			continue
		}
		alive[in.ID] = true
		if p.member(in.ID) == nil && !p.charged(in.ID) { // not one released meanwhile
			p.log.Warn("adopting an instance of the job the pool did not know", zap.String("instance", in.ID))
			l.addMember(p, in)
		}
	}
	for _, m := range p.snapshot() {
		if !alive[m.inst.ID] && !m.doomed.Swap(true) {
			p.log.Warn("instance gone", zap.String("instance", m.inst.ID))
		}
	}
	return nil
}

// charged reports whether instance id has a charge in the pool: it was
// a member once.
func (p *pool) charged(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.chargedLocked(id)
}

// chargedLocked is charged with p.mu held.
func (p *pool) chargedLocked(id string) bool {
	return slices.ContainsFunc(p.charges, func(c plugins.Charge) bool { return c.Instance == id })
}

// addMember adds a provisioned instance to the pool and starts its charge.
func (l *Launcher) addMember(p *pool, in provider.Instance) *member {
	m := &member{inst: in}
	prices, _ := l.currentPrices(l.ctx)
	b := l.o.Provider.Billing()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.members[in.ID] = m
	if p.chargedLocked(in.ID) {
		return m // a retried request answered with what it launched before
	}
	p.charges = append(p.charges, plugins.Charge{Instance: in.ID, Type: in.Type, Zone: in.Zone, Market: in.Market,
		USDPerHour: priceOf(prices, offering{in.Type, in.Zone, in.Market}), Start: in.Launched, Granularity: b.Granularity, Minimum: b.Minimum})
	p.saveChargesLocked()
	return m
}

// release terminates the members ids and ends their charges.
func (l *Launcher) release(ctx context.Context, p *pool, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	var ms []*member
	p.mu.Lock()
	for _, id := range ids {
		if m := p.members[id]; m != nil {
			ms = append(ms, m)
			delete(p.members, id)
		}
	}
	p.mu.Unlock()
	for _, m := range ms {
		if m.stop != nil {
			m.stop()
		}
		if m.conn != nil {
			_ = m.conn.Close()
		}
	}
	now := time.Now().UTC()
	err := l.terminate(ctx, ids)
	p.mu.Lock()
	open := openCharges(p.charges, ids)
	p.mu.Unlock()
	settled := l.settlePrices(ctx, open, now)
	p.mu.Lock()
	for _, id := range ids {
		endCharge(p.charges, id, now, settled)
	}
	p.saveChargesLocked()
	p.mu.Unlock()
	p.log.Info("released instances", zap.Strings("instances", ids), zap.Error(err))
	return err
}

// token is the idempotency token of one provisioning request: the same
// request, retried, carries the same token; no other request does, not
// even one of the next launcher on the same state after a restart (the
// launcher's nonce).
func (l *Launcher) token(p *pool, attempt, round int, o offering, n int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s|%s|%s|%d|%d|%s|%s|%s|%d", l.nonce, l.o.Owner, p.job, attempt, round, o.Type, o.Zone, o.Market, n))
	return hex.EncodeToString(h[:16])
}

// acquire provisions n instances of typ for attempt, failing over across
// zones and markets (see the package comment); it returns what it got,
// which may be fewer than n with an error.
func (l *Launcher) acquire(ctx context.Context, p *pool, attempt int, typ, market string, maxPrice float64, n int) ([]provider.Instance, error) {
	p.rounds++
	round := p.rounds
	var got []provider.Instance
	var errs []error
	zones := l.zones(l.types[typ])
	tries := failover(typ, market, zones, !l.o.NoFallback, l.blockSnapshot(), time.Now())
	for _, o := range tries {
		if l.blockSnapshot().blocked(o, time.Now()) {
			continue // a quota error of the region, met in another zone
		}
		insts, err := l.provision(ctx, provider.ProvisionRequest{Type: typ, Count: n - len(got), Market: o.Market, Zone: o.Zone,
			Tags: l.tags(p.job, attempt), Token: l.token(p, attempt, round, o, n-len(got)), MaxPriceUSD: maxPrice, Boot: p.boot,
			OrphanTimeout: l.o.OrphanTimeout})
		for _, in := range insts {
			if !in.Alive() {
				return got, fmt.Errorf("provision answered with instance %s, %s: a token was reused", in.ID, in.State)
			}
			l.addMember(p, in)
		}
		got = append(got, insts...)
		if len(got) >= n {
			return got, nil
		}
		if err == nil {
			continue
		}
		switch {
		case errors.Is(err, provider.ErrQuota): // the region's: no zone will do in this market
			for _, z := range zones {
				l.blockOffering(offering{typ, z, o.Market}, err.Error())
			}
		case errors.Is(err, provider.ErrCapacity):
			l.blockOffering(o, err.Error())
		default:
			return got, err
		}
		errs = append(errs, err)
	}
	if len(tries) == 0 {
		errs = append(errs, fmt.Errorf("every zone of %s (%s) is blocklisted for now", typ, market))
	}
	return got, fmt.Errorf("%d of %d instances of %s: %w: %w", len(got), n, typ, provider.ErrCapacity, errors.Join(errs...))
}

// provision makes one request, retrying throttling and internal errors
// with exponential back-off.
func (l *Launcher) provision(ctx context.Context, req provider.ProvisionRequest) ([]provider.Instance, error) {
	return retry(ctx, l, "provision "+req.Type+" in "+req.Zone, func() ([]provider.Instance, error) { return l.o.Provider.Provision(ctx, req) })
}

func (l *Launcher) list(ctx context.Context, tags map[string]string) ([]provider.Instance, error) {
	return retry(ctx, l, "list instances", func() ([]provider.Instance, error) { return l.o.Provider.List(ctx, tags) })
}

func (l *Launcher) terminate(ctx context.Context, ids []string) error {
	_, err := retry(ctx, l, "terminate", func() ([]provider.Instance, error) { return nil, l.o.Provider.Terminate(ctx, ids) })
	return err
}

// retryJitter spreads the retries' waits over ±50 %, so that the launchers
// throttled at once do not retry at once.
const retryJitter = 0.5

// retry calls f until it succeeds, fails for good, or Options.Retries
// retries of a retryable error are spent, waiting about RetryBase (±
// retryJitter), then twice as long each time, at most 30 s.
func retry[T any](ctx context.Context, l *Launcher, what string, f func() (T, error)) (T, error) {
	var last error
	try := 0
	v, err := backoff.Retry(ctx, func() (T, error) {
		v, err := f()
		if err != nil && !provider.Retryable(err) {
			return v, backoff.Permanent(err)
		}
		last = err
		return v, err
	}, backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: l.o.RetryBase, RandomizationFactor: retryJitter, Multiplier: 2, MaxInterval: 30 * time.Second}),
		backoff.WithMaxTries(uint(l.o.Retries)+1), backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, d time.Duration) {
			try++
			l.log.Info("retrying", zap.String("call", what), zap.Int("try", try), zap.Duration("after", d), zap.Error(err))
		}))
	if err != nil && ctx.Err() != nil && last != nil && !errors.Is(err, last) {
		err = errors.Join(last, err) // cut short: say what was being retried
	}
	return v, err
}
