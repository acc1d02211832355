package daemon

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// maxRecordedCandidates bounds the candidates kept per decision, so that a
// wide search space does not bloat the job record.
const maxRecordedCandidates = 64

// recordCandidates converts a decision's predictions for the job record,
// keeping the chosen one when there are more than maxRecordedCandidates.
func recordCandidates(preds []predict.Prediction, chosen int) []CandidatePrediction {
	if len(preds) == 0 {
		return nil
	}
	conv := func(i int) CandidatePrediction {
		p := preds[i]
		return CandidatePrediction{Type: p.Type, Workers: p.Workers, Batch: p.Batch,
			StepS: p.StepTime, TotalS: p.TotalS, TotalUSD: p.TotalUSD, Chosen: i == chosen}
	}
	n := min(len(preds), maxRecordedCandidates)
	if chosen >= n {
		n-- // leave room for the chosen one
	}
	out := make([]CandidatePrediction, 0, n+1)
	for i := 0; i < n; i++ {
		out = append(out, conv(i))
	}
	if chosen >= n && chosen < len(preds) {
		out = append(out, conv(chosen))
	}
	return out
}

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
	local, avg     float64
	count          float64
	biased, norms  bool
	progress       float64
	est            gns.Estimator
	began, elapsed float64 // Unix seconds of the job's first step; seconds of the job so far
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

func (o *observer) reset() {
	o.steps, o.dt, o.sync, o.local, o.avg, o.count, o.biased, o.norms = 0, 0, 0, 0, 0, 0, false, false
}

// candidate is the configuration being observed, as the optimizer names it.
func (o *observer) candidate() predict.Candidate {
	return predict.Candidate{Type: o.typ, Nodes: 1, Workers: o.cfg.Workers, Batch: o.cfg.GlobalBatch}
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
	o.seen++
	if o.seen <= warmupSteps || r.Seconds <= 0 {
		return policy.Observation{}, false
	}
	o.steps++
	o.dt += r.Seconds
	if r.SyncSeconds != nil {
		o.sync += min(*r.SyncSeconds, r.Seconds)
	}
	if r.LocalSqr != nil && r.AvgSqr != nil {
		o.local += *r.LocalSqr
		o.avg += *r.AvgSqr
		o.norms = true
		o.count = float64(r.World)
		if r.Count > 0 {
			o.count = float64(r.Count)
		}
		o.biased = r.Biased
	}
	if o.steps < o.wait {
		return policy.Observation{}, false
	}
	n := float64(o.steps)
	local := float64(o.cfg.LocalBatch())
	obs := policy.Observation{
		ElapsedS: o.elapsed,
		SpentUSD: o.elapsed / 3600 * o.price,
		Config:   o.candidate(),
		Steps:    n,
		StepTime: o.dt / n,
		SyncTime: o.sync / n,
	}
	if o.norms && o.count >= 2 && local > 0 {
		obs.Grad = gns.Sample{LocalSqr: o.local / n, TotalSqr: o.avg / n, Count: o.count, Scale: o.count * local / o.m0, Biased: o.biased}
		if est, err := o.est.UpdateSteps(obs.Grad, n); err == nil {
			o.est = est
		}
	}
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

// controller runs a job's policy online: it feeds the job's step records to
// the observer, asks the policy at each report, records every decision and
// moves the job when the policy wants another configuration.
type controller struct {
	s    *supervisor
	r    *running
	pol  policy.Policy
	obs  *observer
	recs chan telemetry.StepRecord
	done chan struct{}
	log  *zap.Logger
}

func (s *supervisor) newController(r *running) (*controller, error) {
	j := r.snapshot()
	spec, price, err := j.Optimize.Spec(j.Config, 0)
	if err != nil {
		return nil, err
	}
	pol, err := policy.New(j.Optimize.Policy, spec, nil)
	if err != nil {
		return nil, err
	}
	typ := spec.Candidates[0].Type
	return &controller{
		s: s, r: r, pol: pol, obs: newObserver(spec.M0, price, typ),
		recs: make(chan telemetry.StepRecord, 4096), done: make(chan struct{}),
		log: s.log.With(zap.String("job", j.ID), zap.String("policy", pol.Name())),
	}, nil
}

// offer hands the controller a step record without ever blocking ingest.
func (c *controller) offer(rec telemetry.StepRecord) {
	select {
	case c.recs <- rec:
	default:
	}
}

// run decides until ctx is done; join waits for it.
func (c *controller) run(ctx context.Context) {
	defer close(c.done)
	c.r.update(func(j *Job) { j.Phase = policy.PhaseWarmup })
	attempt, movedFrom := 0, 0
	var last Decision
	for {
		var rec telemetry.StepRecord
		select {
		case <-ctx.Done():
			return
		case rec = <-c.recs:
		}
		j := c.r.snapshot()
		if j.Attempt == movedFrom {
			continue // the attempt being left: its last steps do not count
		}
		if j.Attempt != attempt {
			attempt = j.Attempt
			c.obs.attemptStarted(attempt, j.Config)
		}
		o, ok := c.obs.add(rec)
		if !ok {
			continue
		}
		if c.obs.est.Steps() > 0 {
			c.r.setNoise(c.obs.est.NoiseScale(c.obs.m0))
		}
		d, err := c.pol.Observe(o)
		if err != nil {
			c.log.Warn("policy", zap.Error(err))
			continue
		}
		c.obs.setWait(d.WaitSteps)
		c.log.Debug("decision", zap.Int64("step", rec.Step), zap.String("reason", d.Reason), zap.Float64("steps", o.Steps))
		dec := c.decision(j, rec.Step, d)
		if dec.To == last.To && dec.Phase == last.Phase && dec.To == j.Config {
			continue // the same verdict again: nothing to record
		}
		last = dec
		c.r.decided(dec)
		c.s.save(ctx, c.r.snapshot())
		c.s.event(telemetry.Event{Kind: telemetry.EventDecided, Job: j.ID, Attempt: attempt, Message: dec.Reason,
			Phase: string(dec.Phase), PredictedS: dec.PredictedS, PredictedUSD: dec.PredictedUSD})
		if dec.To == j.Config {
			continue
		}
		c.log.Info("moving", zap.Int("workers", dec.To.Workers), zap.Int("batch", dec.To.GlobalBatch), zap.String("reason", dec.Reason))
		if _, err := c.s.moveJob(ctx, j.ID, dec.To, dec.Reason); err == nil {
			movedFrom = attempt
		} else if ctx.Err() == nil {
			c.log.Warn("move", zap.Error(err))
			c.s.event(telemetry.Event{Kind: telemetry.EventMoved, Job: j.ID, Attempt: attempt, Message: fmt.Sprintf("move to %d workers, batch %d failed: %v", dec.To.Workers, dec.To.GlobalBatch, err)})
		}
	}
}

// decision turns the policy's verdict into the job record's form.
func (c *controller) decision(j Job, step int64, d policy.Decision) Decision {
	dec := Decision{
		Time: time.Now().UTC(), Step: step, From: j.Config, Reason: d.Reason, Phase: d.Phase,
		To:           plugins.Config{Workers: d.Config.Workers, GlobalBatch: d.Config.Batch, LRScale: j.Config.LRScale},
		Alternatives: len(d.Predictions),
		Candidates:   recordCandidates(d.Predictions, d.Chosen),
	}
	if d.Chosen >= 0 && d.Chosen < len(d.Predictions) {
		p := d.Predictions[d.Chosen]
		dec.PredictedStepS, dec.PredictedS, dec.PredictedUSD = p.StepTime, p.TotalS, p.TotalUSD
	}
	return dec
}

func (c *controller) join() { <-c.done }
