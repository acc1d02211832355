package control

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
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
func recordCandidates(preds []predict.Prediction, chosen int) []api.CandidatePrediction {
	if len(preds) == 0 {
		return nil
	}
	conv := func(i int) api.CandidatePrediction {
		p := preds[i]
		return api.CandidatePrediction{Type: p.Type, Workers: p.Workers, Batch: p.Batch,
			StepS: p.StepTime, TotalS: p.TotalS, TotalUSD: p.TotalUSD, Chosen: i == chosen,
			StepLoS: p.StepLo, StepHiS: p.StepHi, Flags: p.Flags.Words()}
	}
	n := min(len(preds), maxRecordedCandidates)
	if chosen >= n {
		n-- // leave room for the chosen one
	}
	out := make([]api.CandidatePrediction, 0, n+1)
	for i := 0; i < n; i++ {
		out = append(out, conv(i))
	}
	if chosen >= n && chosen < len(preds) {
		out = append(out, conv(chosen))
	}
	return out
}

// Job is what a controller follows of the job it decides for (its
// runner's): the attempt and configuration it runs now, its newest step,
// and where the controller's noise estimate goes.
type Job interface {
	Current() (attempt int, cfg plugins.Config)
	LastStep() int64
	SetNoise(noise float64)
}

// Controller runs a job's policy online: it feeds the job's step records to
// the observer, asks the policy at each report and hands every new verdict
// to the job's runner, which records it and moves the job. It never writes
// the record and never calls the launcher.
type Controller struct {
	job      Job
	verdicts chan<- Verdict
	recs     chan telemetry.StepRecord
	log      *zap.Logger

	// mu guards the policy and what it saw: the runner re-chooses through
	// them at a pre-emption notice (cloud.go), and hands it offers and
	// charges.
	mu      sync.Mutex
	pol     policy.Policy
	obs     *observer
	cloud   *cloudSpace          // nil unless the launcher offers machine types
	history []policy.Observation // a cloud job's, for a re-choice
	// movedFrom is the attempt being left: its last steps do not count.
	movedFrom int
	// pinned holds the job where it runs (Pin).
	pinned atomic.Bool
}

// Pin holds the job at its configuration (scavctl move --pin), or with
// false releases it: the controller goes on observing and deciding, but
// hands its runner no verdict that moves a pinned job.
func (c *Controller) Pin(pinned bool) { c.pinned.Store(pinned) }

// Verdict is a decision the controller hands the runner. When the decision
// moves the job, Reply (buffered) says how the move went: nil once the
// workers have checkpointed and exited.
type Verdict struct {
	Decision api.Decision
	Reply    chan error
}

// New builds the controller of job j, which follows the job through job and
// hands it verdicts. offers are the machine types the job's launcher offers
// now (plugins.Capabilities.Offers): when there are any, the search covers
// them (cloud.go).
func New(j api.Job, offers []plugins.Offer, job Job, verdicts chan<- Verdict, log *zap.Logger) (*Controller, error) {
	spec, price, err := Spec(j.Optimize, j.Config)
	if err != nil {
		return nil, err
	}
	typ := spec.Candidates[0].Type
	cloud, err := newCloudSpace(j, offers)
	if err != nil {
		return nil, err
	}
	if cloud != nil {
		spec, typ = cloud.cur.Spec, cloud.startType()
	}
	pol, err := policy.New(j.Optimize.Policy, spec, nil)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		pol: pol, obs: newObserver(spec.M0, price, typ), job: job, cloud: cloud,
		verdicts: verdicts, recs: make(chan telemetry.StepRecord, 4096),
		log: log.With(zap.String("policy", pol.Name())),
	}
	if cloud != nil {
		c.obs.candidateOf = func(cfg plugins.Config) predict.Candidate { return c.cloud.cur.Candidate(cfg, typ) }
		c.obs.spent = cloud.spent
	}
	return c, nil
}

// Cloud reports whether the controller searches machine types: its runner
// then hands it the launcher's offers and charges as they change.
func (c *Controller) Cloud() bool { return c.cloud != nil }

// Leaving marks attempt as being left: its last steps are not observed.
func (c *Controller) Leaving(attempt int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.movedFrom = attempt
}

// Step hands the controller a step record without ever blocking ingest.
func (c *Controller) Step(rec telemetry.StepRecord) {
	select {
	case c.recs <- rec:
	default:
	}
}

// Run decides until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	attempt := 0
	var last api.Decision
	for {
		var rec telemetry.StepRecord
		select {
		case <-ctx.Done():
			return
		case rec = <-c.recs:
		}
		now, cfg := c.job.Current()
		if c.left(now) {
			c.obs.note(rec) // the attempt being left: its last steps do not count
			continue
		}
		if now != attempt {
			attempt = now
			c.attemptStarted(attempt, cfg, last.To)
		}
		dec, ok := c.observe(rec, cfg)
		if !ok || dec.To == last.To && dec.Phase == last.Phase && dec.To == cfg {
			continue // no report due, or the same verdict again
		}
		if dec.To != cfg && c.pinned.Load() {
			continue // pinned where it runs: no move
		}
		last = dec
		v := Verdict{Decision: dec, Reply: make(chan error, 1)}
		select {
		case c.verdicts <- v:
		case <-ctx.Done():
			return
		}
		if dec.To == cfg {
			continue
		}
		select {
		case err := <-v.Reply:
			if err == nil {
				c.Leaving(attempt)
			}
		case <-ctx.Done():
			return
		}
	}
}

// left reports whether attempt is the one being left.
func (c *Controller) left(attempt int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return attempt == c.movedFrom
}

// attemptStarted resets the observer for a new attempt; a cloud job whose
// relaunch did not get the configuration asked (asked) re-chooses over the
// offers now.
func (c *Controller) attemptStarted(attempt int, cfg, asked plugins.Config) {
	c.mu.Lock()
	c.obs.attemptStarted(attempt, cfg)
	c.mu.Unlock()
	if c.cloud != nil && asked != (plugins.Config{}) && asked != cfg {
		c.Rechoose("the relaunch did not get what it asked") // the next report decides with it
	}
}

// observe takes one step record and, when a report is due, asks the policy.
func (c *Controller) observe(rec telemetry.StepRecord, cfg plugins.Config) (api.Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.obs.add(rec)
	if !ok {
		return api.Decision{}, false
	}
	if c.cloud != nil {
		c.history = append(c.history, o)
	}
	if c.obs.est.Steps() > 0 {
		c.job.SetNoise(c.obs.est.NoiseScale(c.obs.m0))
	}
	d, err := c.pol.Observe(o)
	if err != nil {
		c.log.Warn("policy", zap.Error(err))
		return api.Decision{}, false
	}
	c.obs.setWait(d.WaitSteps)
	c.log.Debug("decision", zap.Int64("step", rec.Step), zap.String("reason", d.Reason), zap.Float64("steps", o.Steps))
	dec := decision(cfg, rec.Step, time.Now().UTC(), d)
	if c.cloud != nil {
		dec.To = c.cloud.toConfig(d.Config, cfg)
	}
	return dec, true
}

// decision turns the policy's verdict, taken at step in configuration from,
// into the job record's form.
func decision(from plugins.Config, step int64, at time.Time, d policy.Decision) api.Decision {
	dec := api.Decision{
		Time: at, Step: step, From: from, Reason: d.Reason, Phase: api.Phase(d.Phase),
		To:           plugins.Config{Workers: d.Config.Workers, GlobalBatch: d.Config.Batch, LRScale: from.LRScale},
		Alternatives: len(d.Predictions),
		Candidates:   recordCandidates(d.Predictions, d.Chosen),
	}
	// What the decision predicts for the configuration it goes to: the
	// chosen candidate's forecast, or a probe's when a model already
	// predicts it, so that every attempt a decision starts can be held to it.
	for i, p := range d.Predictions {
		if i == d.Chosen || d.Chosen < 0 && p.Candidate == d.Config {
			dec.PredictedStepS, dec.PredictedS, dec.PredictedUSD = p.StepTime, p.TotalS, p.TotalUSD
			dec.PredictedStepLoS, dec.PredictedStepHiS, dec.PredictedFlags = p.StepLo, p.StepHi, p.Flags.Words()
			break
		}
	}
	dec.Provisional = d.Provisional
	dec.ThroughputOnly = strings.HasPrefix(d.Reason, policy.ThroughputOnlyReason)
	if d.Phase == policy.PhaseProbing {
		dec.Probe = &api.ProbeValue{Steps: d.WaitSteps}
		if p := d.Probe; p != nil {
			dec.Probe.Gain, dec.Probe.Cost, dec.Probe.Chance, dec.Probe.GainUnit, dec.Probe.Design = p.Gain, p.Cost, p.Chance, p.Units, p.Design
		}
	}
	return dec
}
