package control

import (
	"math"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/stepstats"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// warmupSteps of each attempt are left out of the measurements (process
// start, first all-reduce, caches).
const warmupSteps = 3

// defaultReportSteps is the report interval when the policy names none.
const defaultReportSteps = 10

// observer turns one job's step records into policy observations: per
// report, the mean step and sync time of rank 0's steps after the warm-up of
// the attempt and their mean gradient statistics. It is pure: the caller
// gives it records and the time.
type observer struct {
	m0      float64
	price   float64
	typ     string
	attempt int
	cfg     plugins.Config
	seen    int // steps of this attempt so far
	wait    int // steps per report

	steps          int
	dt, sync       float64
	grads          stepstats.Window // the report's gradient statistics
	progress       float64
	est            gns.Estimator
	began, elapsed float64 // Unix seconds of the job's first step; seconds of the job so far
	// lastStepAt is the Unix time of the last step seen of any attempt;
	// relaunch the measured relaunch before this attempt (from the last
	// step of the previous one to the end of its first), reported once.
	lastStepAt, relaunch float64

	// candidateOf, when set, names a configuration as the optimizer does
	// (a cloud job's type and machines); spent, when set, is what the job
	// has cost by now, when known (its machines' bill). Both are the
	// controller's (cloud.go).
	candidateOf func(plugins.Config) predict.Candidate
	spent       func(elapsed float64) (float64, bool)
}

// newObserver starts observing a job whose base batch is m0.
func newObserver(m0, price float64, typ string) *observer {
	return &observer{m0: m0, price: price, typ: typ, wait: defaultReportSteps}
}

// attemptStarted resets the per-attempt state.
func (o *observer) attemptStarted(attempt int, cfg plugins.Config) {
	o.attempt, o.cfg, o.seen = attempt, cfg, 0
	o.reset()
}

// note records the time of a step of an attempt being left (its steps no
// longer count, but the relaunch is measured from the last of them).
func (o *observer) note(r telemetry.StepRecord) {
	if r.Rank == 0 && r.IsStep() && r.Time > o.lastStepAt {
		o.lastStepAt = r.Time
	}
}

func (o *observer) reset() {
	o.steps, o.dt, o.sync = 0, 0, 0
	o.grads.Reset()
}

// candidate is the configuration being observed, as the optimizer names it.
func (o *observer) candidate() predict.Candidate {
	if o.candidateOf != nil {
		return o.candidateOf(o.cfg)
	}
	return predict.Candidate{Type: o.typ, Nodes: 1, Workers: o.cfg.Workers, Batch: o.cfg.GlobalBatch}
}

// spentUSD is what the job has cost after elapsed seconds: its bill when
// known, else its time at the node's price.
func (o *observer) spentUSD(elapsed float64) float64 {
	if o.spent != nil {
		if usd, ok := o.spent(elapsed); ok {
			return usd
		}
	}
	return elapsed / 3600 * o.price
}

// add takes one step record; it returns an observation when a report is due.
func (o *observer) add(r telemetry.StepRecord) (policy.Observation, bool) {
	if r.Rank != 0 || r.Attempt != o.attempt || !r.IsStep() {
		return policy.Observation{}, false
	}
	if o.began == 0 {
		o.began = r.Time - r.Seconds
	}
	o.elapsed = r.Time - o.began
	if o.seen == 0 && o.lastStepAt > 0 && r.Time > o.lastStepAt {
		o.relaunch = r.Time - o.lastStepAt
	}
	o.note(r)
	o.seen++
	if o.seen <= warmupSteps || r.Seconds <= 0 {
		return policy.Observation{}, false
	}
	o.steps++
	o.dt += r.Seconds
	if r.SyncSeconds != nil {
		o.sync += min(*r.SyncSeconds, r.Seconds)
	}
	if r.LocalBatch <= 0 { // a worker that does not say: the attempt's
		r.LocalBatch = o.cfg.LocalBatch()
	}
	o.grads.Add(r, o.m0)
	if o.steps < o.wait {
		return policy.Observation{}, false
	}
	n := float64(o.steps)
	obs := policy.Observation{
		ElapsedS:  o.elapsed,
		SpentUSD:  o.spentUSD(o.elapsed),
		Config:    o.candidate(),
		Steps:     n,
		StepTime:  o.dt / n,
		SyncTime:  o.sync / n,
		RelaunchS: o.relaunch,
	}
	o.relaunch = 0
	o.est, obs.Grad = o.grads.Update(o.est, n)
	gain := float64(o.cfg.GlobalBatch) / o.m0 // no gradient statistics: every sample counts
	if o.est.Steps() > 0 {
		gain = o.est.Gain(float64(o.cfg.GlobalBatch) / o.m0)
	}
	o.progress += n * gain
	obs.Progress = o.progress
	o.reset()
	return obs, true
}

// setWait sets the steps until the next report (the policy's wish, or the default).
func (o *observer) setWait(steps float64) {
	o.wait = defaultReportSteps
	if steps >= 1 && steps < 1e6 {
		o.wait = int(math.Ceil(steps))
	}
}
