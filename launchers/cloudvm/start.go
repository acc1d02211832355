package cloudvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	gossh "golang.org/x/crypto/ssh"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/notice"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/launchers/ssh"
	"github.com/scavenger-ml/scavenger/plugins"
)

// Start plans the job's pool for the attempt (see the package comment),
// provisions what is missing, waits for it to answer SSH, and starts the
// attempt over SSH on the pool's instances; the instances of another type
// are released once it has started. A type, market or size it cannot have
// is an error (ErrUnsupported beyond Options.MaxInstances).
func (l *Launcher) Start(ctx context.Context, spec plugins.AttemptSpec) (plugins.Handle, error) {
	fail := func(err error) (plugins.Handle, error) {
		return nil, fmt.Errorf("start job %s attempt %d: %w", spec.JobID, spec.Attempt, err)
	}
	if err := spec.Validate(); err != nil {
		return fail(err)
	}
	w, err := l.want(spec)
	if err != nil {
		return fail(err)
	}
	p, err := l.pool(spec.JobID, false)
	if err != nil {
		return fail(err)
	}
	p.start.Lock()
	defer p.start.Unlock()
	if err := l.sync(ctx, p); err != nil {
		return fail(fmt.Errorf("list the job's instances: %w", err))
	}
	var pool []held
	for _, m := range p.snapshot() {
		pool = append(pool, m.held())
	}
	plan := planPool(pool, w, l.o.PoolLimit)
	if err := l.release(ctx, p, plan.ReleaseNow); err != nil {
		p.log.Warn("release", zap.Error(err))
	}
	if plan.Add > 0 {
		insts, err := l.acquire(ctx, p, spec.Attempt, w.Type, w.Market, 0, plan.Add)
		for _, in := range insts {
			plan.Keep = append(plan.Keep, in.ID)
		}
		if err != nil {
			return fail(err)
		}
	}
	hosts, err := l.ready(ctx, p, plan.Keep)
	if err != nil {
		return fail(err)
	}
	a, err := l.startOn(ctx, p, spec, hosts)
	if err != nil {
		return fail(err)
	}
	if err := l.release(ctx, p, plan.ReleaseAfter); err != nil {
		p.log.Warn("release", zap.Error(err))
	}
	return a, nil
}

// want is what spec needs of the pool.
func (l *Launcher) want(spec plugins.AttemptSpec) (want, error) {
	w := want{Type: spec.Config.MachineType, Market: spec.Config.Market}
	if w.Type == "" {
		w.Type = l.o.Types[0]
	}
	if w.Market == "" {
		w.Market = l.o.Market
	}
	t, ok := l.types[w.Type]
	switch {
	case !ok || !slices.Contains(l.o.Types, w.Type):
		return w, fmt.Errorf("machine type %q (this launcher has %v): %w", w.Type, l.o.Types, plugins.ErrUnsupported)
	case w.Market != provider.OnDemand && w.Market != provider.Spot:
		return w, fmt.Errorf("market %q: %w", w.Market, plugins.ErrUnsupported)
	case w.Market == provider.Spot && !t.Spot && l.o.NoFallback:
		return w, fmt.Errorf("type %s has no spot market: %w", w.Type, plugins.ErrUnsupported)
	}
	self := plugins.ResolveMode(spec.Mode, spec.Command) == plugins.ModeSelf
	w.N = instancesFor(spec.Config.Workers, t.Slots, self)
	if w.N > l.o.MaxInstances {
		return w, fmt.Errorf("%d workers of %s need %d instances, above the limit of %d: %w", spec.Config.Workers, w.Type, w.N, l.o.MaxInstances, plugins.ErrUnsupported)
	}
	return w, nil
}

// ready waits for the instances ids to run and answer SSH with the pool's
// host key, starts the notice watchers of the spot ones, and returns them
// in ids' order. New instances that do not come up (an init that died, the
// ready timeout) are released.
func (l *Launcher) ready(ctx context.Context, p *pool, ids []string) ([]*member, error) {
	ctx, cancel := context.WithTimeout(ctx, l.o.ReadyTimeout)
	defer cancel()
	var fresh []string
	for _, id := range ids {
		if m := p.member(id); m == nil || m.conn == nil {
			fresh = append(fresh, id)
		}
	}
	if len(fresh) > 0 {
		insts, err := retry(ctx, l, "wait for instances", func() ([]provider.Instance, error) { return l.o.Provider.WaitReady(ctx, fresh) })
		if err != nil { // of no use, and billed while they run: released
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer rcancel()
			return nil, errors.Join(fmt.Errorf("wait for instances %v: %w", fresh, err), l.release(rctx, p, fresh))
		}
		p.mu.Lock()
		for _, in := range insts {
			if m := p.members[in.ID]; m != nil {
				m.inst = in
			}
		}
		p.mu.Unlock()
	}
	out := make([]*member, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		m := p.member(id)
		if m == nil {
			return nil, fmt.Errorf("instance %s left the pool", id)
		}
		out[i] = m
		if m.conn != nil {
			continue
		}
		wg.Go(func() { errs[i] = l.connect(ctx, p, m) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// connect dials m until its sshd answers with the pool's host key, and
// starts its notice watcher when it is a spot instance.
func (l *Launcher) connect(ctx context.Context, p *pool, m *member) error {
	cfg := &gossh.ClientConfig{User: l.o.User, Auth: []gossh.AuthMethod{gossh.PublicKeys(p.signer)},
		HostKeyCallback: gossh.FixedHostKey(p.hostKey), Timeout: 5 * time.Second}
	addr := m.inst.Addr + ":22"
	for {
		c, err := gossh.Dial("tcp", addr, cfg)
		if err == nil {
			m.conn = c
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("instance %s at %s does not answer SSH: %w (last: %w)", m.inst.ID, addr, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if m.inst.Market == provider.Spot {
		wctx, stop := context.WithCancel(l.ctx)
		m.stop = stop
		l.wg.Go(func() { l.watch(wctx, p, m) })
	}
	return nil
}

// watch waits for a notice of m and acts on it.
func (l *Launcher) watch(ctx context.Context, p *pool, m *member) {
	flavor := notice.FlavorAWS
	if f, ok := l.o.Provider.(provider.MetadataFlavored); ok {
		flavor = f.MetadataFlavor()
	}
	w := notice.New(notice.Options{Endpoint: l.o.Provider.Metadata(), Dial: m.conn.DialContext, Interval: l.o.NoticeInterval, Rebalance: l.o.Rebalance,
		Flavor: flavor})
	defer w.Close()
	n, err := w.Wait(ctx, func(err error) { p.log.Debug("notice poll", zap.String("instance", m.inst.ID), zap.Error(err)) })
	if err != nil {
		return
	}
	l.noticed(ctx, p, m, n)
}

// noticed dooms m, blocklists its offering and tells the workers running
// on the pool, or releases m at once when none are.
func (l *Launcher) noticed(ctx context.Context, p *pool, m *member, n notice.Notice) {
	m.doomed.Store(true)
	p.log.Warn("spot notice", zap.String("instance", m.inst.ID), zap.String("kind", n.Kind), zap.String("action", n.Action), zap.Time("time", n.Time))
	l.blockOffering(offering{m.inst.Type, m.inst.Zone, provider.Spot}, "spot "+n.Kind+" notice for "+m.inst.ID)
	p.mu.Lock()
	a := p.cur
	p.mu.Unlock()
	if a != nil && a.uses(m.inst.ID) {
		err := a.Signal(ctx, l.preempt)
		if err == nil || errors.Is(err, plugins.ErrFinished) {
			return
		}
		p.log.Warn("deliver the pre-emption signal", zap.Error(err))
	}
	if err := l.release(ctx, p, []string{m.inst.ID}); err != nil {
		p.log.Warn("release a reclaimed instance", zap.Error(err))
	}
}

// parseSignal reads "USR1" or "SIGUSR1".
func parseSignal(name string) (syscall.Signal, error) {
	switch name {
	case "USR1", "SIGUSR1":
		return syscall.SIGUSR1, nil
	case "USR2", "SIGUSR2":
		return syscall.SIGUSR2, nil
	case "TERM", "SIGTERM":
		return syscall.SIGTERM, nil
	}
	return 0, fmt.Errorf("pre-emption signal %q: use USR1, USR2 or TERM", name)
}

// sshDialTimeout bounds the ssh launcher's connection to an instance.
const sshDialTimeout = 30 * time.Second

// startOn starts the attempt over SSH on hosts (ranks fill them in order).
func (l *Launcher) startOn(ctx context.Context, p *pool, spec plugins.AttemptSpec, hosts []*member) (*attempt, error) {
	if err := p.writeKnownHosts(hosts); err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range hosts {
		ids = append(ids, m.inst.ID)
	}
	sl, err := l.sshOver(p, hosts)
	if err != nil {
		return nil, err
	}
	// Recover reads which socket the workers' telemetry goes to.
	if err := os.WriteFile(filepath.Join(p.dir, socketFile), []byte(spec.Socket), 0o600); err != nil {
		_ = sl.Close()
		return nil, fmt.Errorf("keep the attempt's socket: %w", err)
	}
	spec.Config.Nodes = 0 // the pool's instances are the nodes; the ranks fill their slots
	h, err := sl.Start(ctx, spec)
	if err != nil {
		_ = sl.Close()
		return nil, err
	}
	a := l.running(p, h, sl, ids)
	p.log.Info("attempt started", zap.Int("attempt", spec.Attempt), zap.Strings("instances", ids))
	return a, nil
}

// socketFile keeps, in a pool's directory, the daemon socket its attempt's
// telemetry goes to.
const socketFile = "socket"

// sshOver is the ssh launcher over hosts, members of p: with the pool's
// keys, its ranks detached (they outlive the daemon: Recover).
func (l *Launcher) sshOver(p *pool, hosts []*member) (*ssh.Launcher, error) {
	var inv []ssh.Host
	for _, m := range hosts {
		inv = append(inv, ssh.Host{Addr: m.inst.Addr, Port: 22, User: l.o.User, Slots: max(l.types[m.inst.Type].Slots, 1)})
	}
	return ssh.New(ssh.Options{Logger: l.o.Logger, Hosts: inv, KeyFiles: []string{p.keyFile()}, KnownHosts: []string{p.knownHosts()},
		Grace: l.o.Grace, NoTelemetryForward: l.o.NoTelemetryForward, PreemptSignal: l.o.PreemptSignal, Detach: true,
		DialTimeout: sshDialTimeout}) // the instances answered a moment ago: a slow handshake is load, not loss
}

// running makes h, on the instances ids of p, the pool's attempt, and
// follows it to its end.
func (l *Launcher) running(p *pool, h plugins.Handle, sl *ssh.Launcher, ids []string) *attempt {
	a := &attempt{Handle: h, ssh: sl, hosts: ids, ended: make(chan struct{})}
	p.mu.Lock()
	p.cur = a
	p.mu.Unlock()
	l.wg.Go(func() { l.follow(p, a) })
	return a
}

// follow waits for the attempt to end, then marks the pool idle and
// releases the instances doomed meanwhile.
func (l *Launcher) follow(p *pool, a *attempt) {
	_, _ = a.Wait(l.ctx)
	close(a.ended)
	_ = a.ssh.Close()
	var doomed []string
	p.mu.Lock()
	if p.cur == a {
		p.cur, p.idleSince = nil, time.Now()
	}
	for id, m := range p.members {
		if m.doomed.Load() {
			doomed = append(doomed, id)
		}
	}
	p.mu.Unlock()
	if len(doomed) > 0 && l.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(l.ctx, time.Minute)
		defer cancel()
		if err := l.release(ctx, p, doomed); err != nil {
			p.log.Warn("release doomed instances", zap.Error(err))
		}
	}
}

// attempt is a started attempt: the ssh launcher's handle, with the
// instances it runs on.
type attempt struct {
	plugins.Handle
	ssh   *ssh.Launcher
	hosts []string
	ended chan struct{}
}

// uses reports whether the attempt runs on instance id.
func (a *attempt) uses(id string) bool { return slices.Contains(a.hosts, id) }
