package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/optimizer/observe"
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
	recs     chan []telemetry.StepRecord // a step message's records at a time
	queued   atomic.Int64                // records in recs, at most maxQueued
	log      *zap.Logger

	// mu guards the policy and what it saw: the runner re-chooses through
	// them at a pre-emption notice (cloud.go), and hands it offers and
	// charges.
	mu    sync.Mutex
	loop  observe.Loop // the observer and the policy: the one decision path
	cloud *cloudSpace  // nil unless the launcher offers machine types
	// candidateOf names a configuration as the policy does.
	candidateOf func(plugins.Config) predict.Candidate
	// reported says whether the policy has seen a report (a re-choice
	// needs one); movedFrom is the attempt being left: its last steps do
	// not count.
	reported  bool
	movedFrom int
	// store is the job's part of the model store (models.go); start the
	// configuration the job was asked to start at.
	store jobStore
	start plugins.Config

	opt     api.Optimize // the job's limits (limits.go)
	created time.Time    // when the job was submitted
	stopped bool         // a stop verdict was handed: once
	// pinned holds the job where it runs (Pin).
	pinned atomic.Bool
}

// Pin holds the job at its configuration (scavctl move --pin), or with
// false releases it: the controller goes on observing and deciding, but
// hands its runner no verdict that moves a pinned job.
func (c *Controller) Pin(pinned bool) { c.pinned.Store(pinned) }

// Verdict is a decision the controller hands the runner. When the decision
// moves the job, Reply (buffered) says how the move went: nil once the
// workers have checkpointed and exited. A verdict with Stop set stops the
// job instead (a limit is reached: limits.go): the workers checkpoint and
// the job ends stopped, Stop saying why.
type Verdict struct {
	Decision api.Decision
	Reply    chan error
	Stop     string
}

// New builds the controller of job j, which follows the job through job and
// hands it verdicts. offers are the machine types the job's launcher offers
// now (plugins.Capabilities.Offers): when there are any, the search covers
// them (cloud.go).
func New(j api.Job, offers []plugins.Offer, job Job, verdicts chan<- Verdict, log *zap.Logger, opts ...Option) (*Controller, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
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
	store := o.open(j, log)
	spec.Prior = store.prior
	pol, err := policy.New(j.Optimize.Policy, spec)
	if errors.Is(err, policy.ErrNoStoredModel) {
		return nil, fmt.Errorf("policy none reuses what earlier runs of the same command measured, and the model store has nothing for %s: run it once under scavenger (or name a stored model with --model-key): %w", store.sig, err)
	}
	if err != nil {
		return nil, err
	}
	ocfg := observe.Config{M0: spec.M0, PriceUSDPerHour: price}
	c := &Controller{
		job: job, cloud: cloud, store: store, start: j.Config,
		verdicts: verdicts, recs: make(chan []telemetry.StepRecord, maxQueued),
		log: log.With(zap.String("policy", pol.Name())), opt: j.Optimize, created: j.Created,
		candidateOf: func(cfg plugins.Config) predict.Candidate {
			return predict.Candidate{Type: typ, Nodes: 1, Workers: cfg.Workers, Batch: cfg.GlobalBatch}
		},
	}
	if cloud != nil {
		c.candidateOf = func(cfg plugins.Config) predict.Candidate { return c.cloud.cur.Candidate(cfg, typ) }
		ocfg.Spent = cloud.spent
	}
	c.loop = observe.Loop{Obs: observe.New(ocfg), Pol: pol}
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

// maxQueued bounds the records waiting for the controller: past it (a burst
// of blocks of records), a message's records are not observed, and the
// controller's work stays bounded whatever the ingest takes.
const maxQueued = 4096

// Steps hands the controller the records of a step message without ever
// blocking ingest (a message at a time: one wake-up of its goroutine, not
// one a record).
func (c *Controller) Steps(recs []telemetry.StepRecord) {
	n := int64(len(recs))
	if n == 0 || c.queued.Add(n) > maxQueued {
		c.queued.Add(-n)
		return
	}
	select {
	case c.recs <- recs:
	default:
		c.queued.Add(-n)
	}
}

// Run decides until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	r := run{c: c}
	defer c.save(ctx) // what the job learnt, for the next job of its signature
	for {
		select {
		case <-ctx.Done():
			return
		case recs := <-c.recs:
			c.queued.Add(-int64(len(recs)))
			for _, rec := range recs {
				if !r.step(ctx, rec) {
					return
				}
			}
		}
	}
}

// run is what Run keeps from one record to the next.
type run struct {
	c       *Controller
	attempt int
	last    api.Decision
}

// step observes one record and hands on the verdict it leads to, if new;
// false when ctx ended meanwhile.
func (r *run) step(ctx context.Context, rec telemetry.StepRecord) bool {
	c := r.c
	now, cfg := c.job.Current()
	if c.left(now) {
		c.note(rec) // the attempt being left: its last steps do not count
		return true
	}
	var rechosen api.Decision
	if now != r.attempt {
		r.attempt = now
		rechosen = c.attemptStarted(r.attempt, cfg, r.last.To)
	}
	if why := c.limit(); why != "" {
		select {
		case c.verdicts <- Verdict{Stop: why}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	dec, ok := c.observe(rec, cfg)
	if rechosen.Reason != "" {
		dec, ok = rechosen, true // the first step of an attempt is no report's
	}
	if !ok || dec.To == r.last.To && dec.Phase == r.last.Phase && dec.To == cfg {
		return true // no report due, or the same verdict again
	}
	if dec.To != cfg && c.pinned.Load() {
		return true // pinned where it runs: no move
	}
	r.last = dec
	v := Verdict{Decision: dec, Reply: make(chan error, 1)}
	select {
	case c.verdicts <- v:
	case <-ctx.Done():
		return false
	}
	if dec.To == cfg {
		return true
	}
	select {
	case err := <-v.Reply:
		if err == nil {
			c.Leaving(r.attempt)
		}
		return true
	case <-ctx.Done():
		return false
	}
}

// limit is the reason to stop the job now that one of its limits is
// reached, the first time it is; "" otherwise.
func (c *Controller) limit() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ""
	}
	var spent float64
	var known bool
	if c.cloud != nil {
		spent, known = c.cloud.spent(0)
	}
	why := limitReached(c.opt, spent, known, time.Since(c.created))
	c.stopped = why != ""
	return why
}

// left reports whether attempt is the one being left.
func (c *Controller) left(attempt int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return attempt == c.movedFrom
}

// note records a step of the attempt being left.
func (c *Controller) note(rec telemetry.StepRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loop.Obs.Note(rec)
}

// attemptStarted starts observing a new attempt; a cloud job whose
// relaunch did not get the configuration asked (asked) re-chooses over the
// offers now, and its decision is the verdict (the zero Decision: none).
func (c *Controller) attemptStarted(attempt int, cfg, asked plugins.Config) api.Decision {
	c.mu.Lock()
	c.loop.Obs.Begin(attempt, c.candidateOf(cfg))
	c.mu.Unlock()
	if c.cloud != nil && asked != (plugins.Config{}) && asked != cfg {
		if dec, ok := c.Rechoose("the relaunch did not get what it asked", false); ok {
			return dec
		}
	}
	return api.Decision{}
}

// observe takes one step record and, when a report is due, asks the policy.
func (c *Controller) observe(rec telemetry.StepRecord, cfg plugins.Config) (api.Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, o, ok, err := c.loop.Step(rec, 1)
	if !ok {
		return api.Decision{}, false
	}
	if phi, ok := c.loop.Obs.NoiseScale(); ok {
		c.job.SetNoise(phi)
	}
	if err != nil {
		c.log.Warn("policy", zap.Error(err))
		return api.Decision{}, false
	}
	c.reported = true
	if d.Commit {
		c.saveLocked(context.Background())
	}
	c.log.Debug("decision", zap.Int64("step", rec.Step), zap.String("reason", d.Reason), zap.Float64("steps", o.Steps))
	dec := decision(cfg, rec.Step, time.Now().UTC(), d)
	if c.cloud != nil {
		dec.To, dec.SpentUSD = c.cloud.toConfig(d.Config, cfg), c.cloud.spentUSD()
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
			dec.PredictedLoS, dec.PredictedHiS, dec.PredictedUSDLo, dec.PredictedUSDHi = p.TotalSLo, p.TotalSHi, p.TotalUSDLo, p.TotalUSDHi
			if p.StepTime > 0 {
				dec.PredictedSteps = p.RemainingS / p.StepTime
			}
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
