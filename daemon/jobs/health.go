package jobs

import (
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// A running attempt's health, as its step records tell it: a watchdog for
// ranks that stop reporting steps (a hung collective, a stopped process),
// and the loss turning NaN or infinite. The watch looks every healthEvery:
//
//	stepping --no step for the stall timeout--> stalled (record, event, metric)
//	stalled --a step again--> stepping
//	stalled, --on-stall restart --> the attempt is stopped and the job
//	                                restarts from its checkpoint (a crash)
//	a NaN or infinite loss --> recorded once, an event; --on-nan stop stops the job
//
// The stall timeout is the job's --stall-timeout, else 10 times the slowest
// step seen, at least api.MinStallTimeout: the first step of an attempt
// (loading data, compiling) is not judged, as nothing says how long it takes.

// healthEvery is how often the watch looks at the attempt's health.
const healthEvery = 2 * time.Second

// stallTimeout is how long the ranks may report no step: set when the job
// names one, else 10 times slowest (seconds), at least api.MinStallTimeout.
func stallTimeout(set time.Duration, slowest float64) time.Duration {
	if set > 0 {
		return set
	}
	return max(api.MinStallTimeout, time.Duration(10*slowest*float64(time.Second)))
}

// lossText says what a loss that is not finite is.
func lossText(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return fmt.Sprint(v)
}

// health looks at the attempt's steps: a loss that turned NaN, a stall.
func (w *watch) health() {
	j, p := &w.r.rec.job, w.r.prog.now()
	if p.BadLoss != nil && (j.BadLoss == nil || j.BadLoss.Attempt != w.n) {
		w.badLoss(p)
	}
	if p.LastAt.IsZero() || w.out.stopped || w.out.moved != nil {
		return
	}
	timeout := stallTimeout(j.Faults.StallTimeout.D(), p.Slowest)
	silent := time.Since(p.LastAt)
	switch {
	case silent > timeout && j.Stalled == nil:
		j.Stalled = &api.Stall{Since: p.LastAt.UTC(), Step: p.LastStep, Timeout: api.Duration(timeout)}
		w.r.save(w.kill)
		msg := fmt.Sprintf("stalled: its ranks reported no step for %s, since step %d (--stall-timeout %s)", silent.Round(time.Second), p.LastStep, timeout)
		w.r.log.Warn("the job's ranks report no step: stalled", zap.Duration("silent", silent), zap.Int64("step", p.LastStep), zap.Duration("timeout", timeout))
		if j.Faults.OnStall == api.StallRestart {
			msg += "; restarting it from its last checkpoint (--on-stall restart)"
			w.out.stalled = silent
			w.stopAttempt(w.grace)
		}
		w.r.event(telemetry.EventStalled, w.n, msg)
	case silent <= timeout && j.Stalled != nil:
		w.r.event(telemetry.EventStalled, w.n, fmt.Sprintf("steps again after %s without one (step %d)", p.LastAt.Sub(j.Stalled.Since).Round(time.Second), p.LastStep))
		j.Stalled = nil
		w.r.save(w.kill)
	}
}

// badLoss records that the loss turned NaN or infinite, and with --on-nan
// stop stops the job.
func (w *watch) badLoss(p Progress) {
	j := &w.r.rec.job
	j.BadLoss = &api.BadLoss{Attempt: w.n, Step: p.BadStep, Value: lossText(*p.BadLoss), Time: time.Now().UTC()}
	w.r.save(w.kill)
	msg := fmt.Sprintf("the loss turned %s at step %d: the model no longer trains (a learning rate too high, a batch of 0, bad data?)", j.BadLoss.Value, p.BadStep)
	w.r.log.Warn("the loss is not finite", zap.String("loss", j.BadLoss.Value), zap.Int64("step", p.BadStep))
	if j.Faults.OnNaN == api.NaNStop && !w.out.stopped {
		msg += "; stopping it (--on-nan stop)"
		w.out.nanStop = true
		w.r.event(telemetry.EventBadLoss, w.n, msg)
		w.stop(w.grace)
		return
	}
	w.r.event(telemetry.EventBadLoss, w.n, msg+" (--on-nan stop would stop it)")
}

// lossNote is what a job's end adds when its last loss is not finite ("" when it is).
func (r *runner) lossNote() string {
	p := r.prog.now()
	if p.Loss == nil || !math.IsNaN(*p.Loss) && !math.IsInf(*p.Loss, 0) {
		return ""
	}
	note := fmt.Sprintf("its last loss was %s", lossText(*p.Loss))
	if p.BadLoss != nil {
		note += fmt.Sprintf(" (%s since step %d)", lossText(*p.BadLoss), p.BadStep)
	}
	return note + ": the model did not train"
}
