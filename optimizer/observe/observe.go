// Package observe is the one path from a job's step records to its
// policy's decisions, live and simulated: an Observer turns step records
// (telemetry.StepRecord) into the policy's observations — per report, the
// mean step and sync time of rank 0's steps after each attempt's warm-up,
// their mean gradient statistics, the job's time, money and scale-invariant
// progress so far, the relaunch measured before the attempt — and a Loop
// hands each observation to the policy and the policy's wish for the next
// report back to the observer. The daemon's controller (daemon/control)
// feeds it the records its workers send; the simulator (optimizer/sim)
// feeds it the records a trace-driven job emits. It is pure: records in,
// observations and decisions out; no clock, no I/O.
package observe

import (
	"math"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/stepstats"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// WarmupSteps of each attempt are left out of the measurements (process
// start, first all-reduce, caches).
const WarmupSteps = 3

// DefaultReportSteps is the steps of a report when the policy names none
// and Config names no other.
const DefaultReportSteps = 10

// Config is what an Observer needs of its job.
type Config struct {
	// M0 is the base batch progress is counted in.
	M0 float64
	// PriceUSDPerHour prices the job's time when Spent does not say what
	// it has cost.
	PriceUSDPerHour float64
	// Spent, when set, is what the job has cost after elapsed seconds
	// (its machines' bill), when known.
	Spent func(elapsedS float64) (usd float64, ok bool)
	// ReportSteps is the steps of a report when the policy names none
	// (0: DefaultReportSteps); ReportSeconds, when positive, makes such a
	// report at least that many seconds of steps long.
	ReportSteps   float64
	ReportSeconds float64
}

// Observer turns one job's step records into policy observations.
type Observer struct {
	cfg     Config
	attempt int
	cand    predict.Candidate
	seen    float64 // steps of this attempt so far
	wait    float64 // steps per report; 0: the default

	steps    float64
	dt, sync float64
	grads    stepstats.Window // the report's gradient statistics
	progress float64
	est      gns.Estimator
	// began and elapsed: Unix seconds of the job's first step's start;
	// seconds of the job so far.
	began, elapsed float64
	// lastStepAt is the Unix time of the last step seen of any attempt;
	// relaunch the measured relaunch before this attempt (from the last
	// step of the previous one to the end of its first), reported once.
	lastStepAt, relaunch float64
}

// New starts observing a job.
func New(cfg Config) *Observer {
	if !(cfg.ReportSteps > 0) {
		cfg.ReportSteps = DefaultReportSteps
	}
	return &Observer{cfg: cfg}
}

// Begin starts observing attempt, which runs candidate c.
func (o *Observer) Begin(attempt int, c predict.Candidate) {
	o.attempt, o.cand, o.seen = attempt, c, 0
	o.reset()
}

// Attempt is the attempt being observed.
func (o *Observer) Attempt() int { return o.attempt }

// Note records the time of a step of an attempt being left: its steps no
// longer count, but the relaunch is measured from the last of them.
func (o *Observer) Note(r telemetry.StepRecord) {
	if r.Rank == 0 && r.IsStep() && r.Time > o.lastStepAt {
		o.lastStepAt = r.Time
	}
}

func (o *Observer) reset() {
	o.steps, o.dt, o.sync = 0, 0, 0
	o.grads.Reset()
}

// spentUSD is what the job has cost after elapsed seconds: its bill when
// known, else its time at the price.
func (o *Observer) spentUSD(elapsed float64) float64 {
	if o.cfg.Spent != nil {
		if usd, ok := o.cfg.Spent(elapsed); ok {
			return usd
		}
	}
	return elapsed / 3600 * o.cfg.PriceUSDPerHour
}

// Add takes one step record; it returns an observation when a report is
// due.
func (o *Observer) Add(r telemetry.StepRecord) (policy.Observation, bool) {
	return o.AddN(r, 1)
}

// AddN takes a record that stands for n consecutive identical steps, r
// being the last of them (the simulator's; a live worker's records are one
// step each); it returns an observation when a report is due.
func (o *Observer) AddN(r telemetry.StepRecord, n float64) (policy.Observation, bool) {
	if r.Rank != 0 || r.Attempt != o.attempt || !r.IsStep() || !(n > 0) {
		return policy.Observation{}, false
	}
	firstEnd := r.Time - (n-1)*r.Seconds // when the first of the n steps ended
	if o.began == 0 {
		o.began = firstEnd - r.Seconds
	}
	o.elapsed = r.Time - o.began
	if o.seen == 0 && o.lastStepAt > 0 && firstEnd > o.lastStepAt {
		o.relaunch = firstEnd - o.lastStepAt
	}
	o.Note(r)
	warm := math.Max(math.Min(n, WarmupSteps-o.seen), 0)
	o.seen += n
	n -= warm
	if n <= 0 || r.Seconds <= 0 {
		return policy.Observation{}, false
	}
	o.steps += n
	o.dt += n * r.Seconds
	if r.SyncSeconds != nil {
		o.sync += n * min(*r.SyncSeconds, r.Seconds)
	}
	if r.LocalBatch <= 0 { // a worker that does not say: the attempt's
		r.LocalBatch = int(math.Round(o.cand.Local()))
	}
	o.grads.AddN(r, o.cfg.M0, n)
	if o.steps < o.reportSteps(o.dt/o.steps)-1e-9 {
		return policy.Observation{}, false
	}
	return o.report(), true
}

// reportSteps is the steps of the report under way, at stepS seconds a
// step.
func (o *Observer) reportSteps(stepS float64) float64 {
	if o.wait > 0 {
		return o.wait
	}
	n := o.cfg.ReportSteps
	if o.cfg.ReportSeconds > 0 && stepS > 0 {
		n = math.Max(n, math.Ceil(o.cfg.ReportSeconds/stepS))
	}
	return n
}

// report closes the report under way.
func (o *Observer) report() policy.Observation {
	n := o.steps
	obs := policy.Observation{
		ElapsedS:  o.elapsed,
		SpentUSD:  o.spentUSD(o.elapsed),
		Config:    o.cand,
		Steps:     n,
		StepTime:  o.dt / n,
		SyncTime:  o.sync / n,
		RelaunchS: o.relaunch,
	}
	o.relaunch = 0
	o.est, obs.Grad = o.grads.Update(o.est, n)
	scale := float64(o.cand.Batch) / o.cfg.M0
	gain := scale // no gradient statistics: every sample counts
	if o.est.Steps() > 0 {
		gain = o.est.Gain(scale)
	}
	o.progress += n * gain
	obs.Progress = o.progress
	o.reset()
	return obs
}

// StepsToReport is how many more steps of stepS seconds each the attempt
// must run before its next report is due, its warm-up included.
func (o *Observer) StepsToReport(stepS float64) float64 {
	return math.Max(WarmupSteps-o.seen, 0) + math.Max(o.reportSteps(stepS)-o.steps, 0)
}

// Wait sets the steps until the next report: the policy's wish, or the
// default.
func (o *Observer) Wait(steps float64) {
	o.wait = 0
	if steps >= 1 && steps < 1e6 {
		o.wait = math.Ceil(steps)
	}
}

// NoiseScale is the job's gradient noise scale in samples, once its
// records have carried gradient statistics.
func (o *Observer) NoiseScale() (float64, bool) {
	if o.est.Steps() == 0 {
		return 0, false
	}
	return o.est.NoiseScale(o.cfg.M0), true
}

// Loop feeds a policy through an observer: every decision, live or
// simulated, is taken here.
type Loop struct {
	Obs *Observer
	Pol policy.Policy
}

// Step takes a record standing for n steps (1 for a live worker's) and,
// when a report is due, asks the policy; ok says whether it did.
func (l *Loop) Step(r telemetry.StepRecord, n float64) (d policy.Decision, o policy.Observation, ok bool, err error) {
	if o, ok = l.Obs.AddN(r, n); !ok {
		return policy.Decision{}, o, false, nil
	}
	if d, err = l.Pol.Observe(o); err != nil {
		return d, o, true, err
	}
	l.Obs.Wait(d.WaitSteps)
	return d, o, true, nil
}
