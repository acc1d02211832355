package cloudvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/internal/jsonfile"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/plugins"
)

// chargesFile holds a pool's charges in its directory.
const chargesFile = "charges.json"

// readCharges reads the charges kept in a pool directory.
func readCharges(dir string) ([]plugins.Charge, error) {
	b, err := os.ReadFile(filepath.Join(dir, chargesFile))
	if err != nil {
		return nil, err
	}
	var cs []plugins.Charge
	if err := json.Unmarshal(b, &cs); err != nil {
		return nil, fmt.Errorf("read charges in %s: %w", dir, err)
	}
	return cs, nil
}

// writeCharges keeps cs in dir.
func writeCharges(dir string, cs []plugins.Charge) error {
	return jsonfile.Write(filepath.Join(dir, chargesFile), cs, 0o600)
}

// saveChargesLocked keeps the pool's charges (p.mu held).
func (p *pool) saveChargesLocked() {
	if err := writeCharges(p.dir, p.charges); err != nil {
		p.log.Warn("keep charges", zap.Error(err))
	}
}

// endCharge ends the open charge of instance id in cs at t, with the
// prices it was billed at when settled knows them.
func endCharge(cs []plugins.Charge, id string, t time.Time, settled map[string]plugins.Charge) {
	for i := range cs {
		if cs[i].Instance == id && cs[i].End == nil {
			cs[i].End = &t
			if s, ok := settled[id]; ok {
				cs[i].USDPerHour, cs[i].Prices = s.USDPerHour, s.Prices
			}
			return
		}
	}
}

// openCharges are the charges of cs still running for the instances ids.
func openCharges(cs []plugins.Charge, ids []string) []plugins.Charge {
	var out []plugins.Charge
	for _, c := range cs {
		if c.End == nil && slices.Contains(ids, c.Instance) {
			out = append(out, c)
		}
	}
	return out
}

// settlePrices returns, by instance, the spot charges of cs ending at end
// with the prices in effect over their lives, from the provider's spot
// price history (where it keeps one; without it, or when it cannot be
// read, a charge keeps the prices the launcher saw while it ran).
func (l *Launcher) settlePrices(ctx context.Context, cs []plugins.Charge, end time.Time) map[string]plugins.Charge {
	ph, ok := l.o.Provider.(provider.PriceHistorian)
	if !ok {
		return nil
	}
	out := map[string]plugins.Charge{}
	for _, c := range cs {
		if c.Market != provider.Spot {
			continue
		}
		hist, err := retry(ctx, l, "spot price history", func() ([]provider.Price, error) { return ph.SpotPriceHistory(ctx, c.Type, c.Zone, c.Start, end) })
		if err != nil || len(hist) == 0 {
			l.log.Warn("spot price history: billing at the prices seen", zap.String("instance", c.Instance), zap.Error(err))
			continue
		}
		c.USDPerHour, c.Prices = pricesOver(hist, c.Start)
		out[c.Instance] = c
	}
	return out
}

// pricesOver is the price in effect at start among hist (oldest first; the
// first one when none is that old) and its changes after start.
func pricesOver(hist []provider.Price, start time.Time) (float64, []plugins.PriceChange) {
	at := hist[0].USDPerHour
	var changes []plugins.PriceChange
	for _, h := range hist {
		switch {
		case !h.At.After(start):
			at = h.USDPerHour
		case len(changes) == 0 && h.USDPerHour == at, len(changes) > 0 && h.USDPerHour == changes[len(changes)-1].USDPerHour:
		default:
			changes = append(changes, plugins.PriceChange{At: h.At, USDPerHour: h.USDPerHour})
		}
	}
	return at, changes
}

// notePrices adds to the running spot charges of the pool the changes of
// their offering's price among prices (fetched now): the charge goes on at
// the new price from when it was set (at the latest, now).
func (p *pool) notePrices(prices []provider.Price, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := false
	for i := range p.charges {
		c := &p.charges[i]
		if c.End != nil || c.Market != provider.Spot {
			continue
		}
		usd := priceOf(prices, offering{c.Type, c.Zone, c.Market})
		if usd <= 0 || usd == c.PriceAt(now) {
			continue
		}
		at := now
		for _, pr := range prices {
			if pr.Type == c.Type && pr.Zone == c.Zone && pr.Market == c.Market && !pr.At.IsZero() && pr.At.Before(now) {
				at = pr.At
			}
		}
		last := c.Start
		if n := len(c.Prices); n > 0 {
			last = c.Prices[n-1].At
		}
		c.Prices = append(c.Prices, plugins.PriceChange{At: maxTime(at, last), USDPerHour: usd})
		changed = true
	}
	if changed {
		p.saveChargesLocked()
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Charges lists the instances acquired for job and what they cost (see
// plugins.Charge): those of its pool, or, for a job that has none here
// (it has ended, or scavd restarted), those kept in the state directory.
func (l *Launcher) Charges(_ context.Context, job string) ([]plugins.Charge, error) {
	l.mu.Lock()
	p := l.pools[job]
	l.mu.Unlock()
	if p != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		return slices.Clone(p.charges), nil
	}
	cs, err := readCharges(filepath.Join(l.o.StateDir, "pools", job))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return cs, err
}

// Release terminates every instance of job's pool (the job has ended) and
// forgets the pool; its charges stay in the state directory.
func (l *Launcher) Release(ctx context.Context, job string) error {
	l.mu.Lock()
	p := l.pools[job]
	l.mu.Unlock()
	if p == nil {
		return nil
	}
	p.start.Lock() // no attempt is being provisioned meanwhile
	defer p.start.Unlock()
	var ids []string
	for _, m := range p.snapshot() {
		ids = append(ids, m.inst.ID)
	}
	err := l.release(ctx, p, ids)
	l.mu.Lock()
	if l.pools[job] == p {
		delete(l.pools, job)
	}
	l.mu.Unlock()
	_ = os.Remove(p.keyFile())
	_ = os.Remove(p.hostKeyFile())
	_ = os.Remove(p.knownHosts())
	if err != nil {
		return fmt.Errorf("release the instances of job %s: %w", job, err)
	}
	return nil
}

// StopOrphaned terminates the instances of an attempt a previous daemon
// started and could not stop (it was killed): every instance of the job
// with this launcher's owner. It returns how many there were.
func (l *Launcher) StopOrphaned(ctx context.Context, spec plugins.RecoverSpec) (int, error) {
	if err := l.Release(ctx, spec.JobID); err != nil {
		return 0, err
	}
	n, err := l.terminateUnowned(ctx, map[string]string{provider.TagOwner: l.o.Owner, provider.TagJob: spec.JobID})
	if err != nil {
		return n, fmt.Errorf("stop the instances of job %s: %w", spec.JobID, err)
	}
	return n, nil
}

// terminateUnowned terminates the instances with tags that belong to no
// pool of this launcher, and ends their charges in their job's directory.
func (l *Launcher) terminateUnowned(ctx context.Context, tags map[string]string) (int, error) {
	insts, err := l.list(ctx, tags)
	if err != nil {
		return 0, err
	}
	byJob := map[string][]string{}
	l.mu.Lock()
	for _, in := range insts {
		if job := in.Tags[provider.TagJob]; l.pools[job] == nil {
			byJob[job] = append(byJob[job], in.ID)
		}
	}
	l.mu.Unlock()
	n := 0
	var errs []error
	for job, ids := range byJob {
		now := time.Now().UTC()
		if err := l.terminate(ctx, ids); err != nil {
			errs = append(errs, err)
			continue
		}
		n += len(ids)
		l.log.Warn("terminated instances of a job that has no pool here", zap.String("job", job), zap.Strings("instances", ids))
		dir := filepath.Join(l.o.StateDir, "pools", job)
		if cs, err := readCharges(dir); err == nil {
			settled := l.settlePrices(ctx, openCharges(cs, ids), now)
			for _, id := range ids {
				endCharge(cs, id, now, settled)
			}
			_ = writeCharges(dir, cs)
		}
	}
	return n, errors.Join(errs...)
}

// EndCharges ends the open charges kept in the launcher state directory
// stateDir (a cloudvm Options.StateDir) of the instances ended reports
// ended (and when): their instances were destroyed while no launcher ran
// (scavd --cloud-cleanup), so that no job's cost goes on growing.
func EndCharges(stateDir string, ended func(instance string) (time.Time, bool)) error {
	dirs, err := os.ReadDir(filepath.Join(stateDir, "pools"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("end charges: %w", err)
	}
	var errs []error
	for _, d := range dirs {
		dir := filepath.Join(stateDir, "pools", d.Name())
		cs, err := readCharges(dir)
		if err != nil {
			continue // a pool that never charged
		}
		changed := false
		for i := range cs {
			if at, ok := ended(cs[i].Instance); ok && cs[i].End == nil {
				cs[i].End, changed = &at, true
			}
		}
		if changed {
			errs = append(errs, writeCharges(dir, cs))
		}
	}
	return errors.Join(errs...)
}
