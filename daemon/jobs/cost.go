package jobs

import (
	"context"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
)

// What a job's machines cost
//
// A launcher that acquires machines (cloudvm, a plugins.Biller) bills each
// from its launch to its termination. The runner splits that time among the
// job's attempts: attempt k owns the time after the previous attempt ended
// until it ends itself (the first from the start, the last until the
// machines end, after the job), so that provisioning, probes and idle time
// between attempts are all counted, once. The rounding and minimum of the
// provider's billing go to the attempt in whose time the machine ended.
// The sum over the attempts is what the provider bills.

// attemptCost is what charges cs cost in the window (from, to]: a zero from
// is the beginning of time, a zero to the end of it; a charge still running
// counts until now.
func attemptCost(cs []plugins.Charge, from, to, now time.Time) api.Cost {
	var out api.Cost
	for _, c := range cs {
		end := now
		if c.End != nil {
			end = *c.End
		}
		lo, hi := c.Start, end
		if !from.IsZero() && from.After(lo) {
			lo = from
		}
		if !to.IsZero() && to.Before(hi) {
			hi = to
		}
		s := math.Max(hi.Sub(lo).Seconds(), 0)
		billed, usd := s, c.USDBetween(lo, hi) // at the prices in effect (a spot price moves)
		if c.End != nil && (from.IsZero() || c.End.After(from)) && (to.IsZero() || !c.End.After(to)) {
			life := c.Seconds(now)
			billed += c.Billed(life) - life // the rounding and the minimum, at the last price
			usd += (c.Billed(life) - life) / 3600 * c.PriceAt(*c.End)
		}
		if billed <= 0 {
			continue
		}
		ic := api.InstanceCost{ID: c.Instance, Type: c.Type, Zone: c.Zone, Market: c.Market, USDPerHour: c.USDPerHour,
			Seconds: s, BilledSeconds: billed, USD: usd}
		out.Instances = append(out.Instances, ic)
		out.InstanceSeconds += s
		out.BilledSeconds += billed
		out.USD += ic.USD
	}
	return out
}

// jobCosts sets the cost of every attempt of j and of j from cs at now;
// final: the job has ended and its machines with it, so the last attempt
// owns everything after the one before it. The job's cost is every
// machine's, those of the starts that failed included (a job whose only
// start failed has no attempt, and its machines still cost).
func jobCosts(j *api.Job, cs []plugins.Charge, now time.Time, final bool) {
	if len(cs) == 0 {
		return
	}
	total := attemptCost(cs, time.Time{}, time.Time{}, now)
	for k := range j.Attempts {
		a := &j.Attempts[k]
		var from, to time.Time
		if k > 0 && j.Attempts[k-1].Ended != nil {
			from = *j.Attempts[k-1].Ended
		}
		if a.Ended != nil && !(final && k == len(j.Attempts)-1) {
			to = *a.Ended
		}
		c := attemptCost(cs, from, to, now)
		a.Cost = &c
	}
	j.Cost = &total
}

// biller is the runner's launcher when it bills machines.
func (r *runner) biller() (plugins.Biller, bool) {
	b, ok := r.g.o.Launcher.(plugins.Biller)
	return b, ok
}

// recordCost updates the job's costs from its machines' charges (an
// attempt has just ended).
func (r *runner) recordCost(ctx context.Context) {
	b, ok := r.biller()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	r.observeCharges(chargeJob(ctx, b, &r.rec.job, false, r.log))
}

// chargeJob reads the charges of j's machines and records its costs
// (final: the job has ended); it returns the charges (nil when they could
// not be read).
func chargeJob(ctx context.Context, b plugins.Biller, j *api.Job, final bool, log *zap.Logger) []plugins.Charge {
	cs, err := b.Charges(ctx, j.ID)
	if err != nil {
		log.Warn("read the machines' charges", zap.String("job", j.ID), zap.Error(err))
		return nil
	}
	jobCosts(j, cs, time.Now().UTC(), final)
	return cs
}

// settleCost releases the job's machines (it has ended) and records their
// final costs.
func (r *runner) settleCost(ctx context.Context) {
	b, ok := r.biller()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*callTimeout)
	defer cancel()
	if err := b.Release(ctx, r.rec.job.ID); err != nil {
		r.log.Warn("release the job's machines", zap.Error(err))
	}
	chargeJob(ctx, b, &r.rec.job, true, r.log)
}
