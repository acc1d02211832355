package jobs

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/control"
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

// controller runs a job's policy online: it feeds the job's step records to
// the observer, asks the policy at each report and hands every new verdict
// to the job's runner, which records it and moves the job. It never writes
// the record and never calls the launcher.
type controller struct {
	current  func() (attempt int, cfg plugins.Config) // the runner's attempt now
	prog     *progress
	verdicts chan<- verdict
	recs     chan telemetry.StepRecord
	log      *zap.Logger

	// mu guards the policy and what it saw: the runner re-chooses through
	// them at a pre-emption notice (cloud.go).
	mu      sync.Mutex
	pol     policy.Policy
	obs     *observer
	cloud   *cloudSpace          // nil unless the launcher offers machine types
	history []policy.Observation // a cloud job's, for a re-choice
	// movedFrom is the attempt being left: its last steps do not count.
	movedFrom int
}

// verdict is a decision the controller hands the runner. When the decision
// moves the job, reply (buffered) says how the move went: nil once the
// workers have checkpointed and exited.
type verdict struct {
	dec   api.Decision
	reply chan error
}

// newController builds the controller of job j, which the runner follows
// through current, prog and verdicts. When launcher offers machine types,
// the search covers them (cloud.go).
func newController(ctx context.Context, j api.Job, launcher plugins.Launcher, current func() (int, plugins.Config), prog *progress,
	verdicts chan<- verdict, log *zap.Logger) (*controller, error) {
	spec, price, err := control.Spec(j.Optimize, j.Config)
	if err != nil {
		return nil, err
	}
	typ := spec.Candidates[0].Type
	cloud, err := newCloudSpace(ctx, j, launcher)
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
	c := &controller{
		pol: pol, obs: newObserver(spec.M0, price, typ), current: current, prog: prog, cloud: cloud,
		verdicts: verdicts, recs: make(chan telemetry.StepRecord, 4096),
		log: log.With(zap.String("policy", pol.Name())),
	}
	if cloud != nil {
		c.obs.candidateOf = func(cfg plugins.Config) predict.Candidate { return c.cloud.cur.Candidate(cfg, typ) }
		if cloud.spent != nil {
			c.obs.spent = func(float64) (float64, bool) { return cloud.spent(ctx) }
		}
	}
	return c, nil
}

// leaving marks attempt as being left: its last steps are not observed.
func (c *controller) leaving(attempt int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.movedFrom = attempt
}

// offer hands the controller a step record without ever blocking ingest.
func (c *controller) offer(rec telemetry.StepRecord) {
	select {
	case c.recs <- rec:
	default:
	}
}

// run decides until ctx is done.
func (c *controller) run(ctx context.Context) {
	attempt := 0
	var last api.Decision
	for {
		var rec telemetry.StepRecord
		select {
		case <-ctx.Done():
			return
		case rec = <-c.recs:
		}
		now, cfg := c.current()
		if c.left(now) {
			c.obs.note(rec) // the attempt being left: its last steps do not count
			continue
		}
		if now != attempt {
			attempt = now
			c.attemptStarted(ctx, attempt, cfg, last.To)
		}
		dec, ok := c.observe(rec, cfg)
		if !ok || dec.To == last.To && dec.Phase == last.Phase && dec.To == cfg {
			continue // no report due, or the same verdict again
		}
		last = dec
		v := verdict{dec: dec, reply: make(chan error, 1)}
		select {
		case c.verdicts <- v:
		case <-ctx.Done():
			return
		}
		if dec.To == cfg {
			continue
		}
		select {
		case err := <-v.reply:
			if err == nil {
				c.leaving(attempt)
			}
		case <-ctx.Done():
			return
		}
	}
}

// left reports whether attempt is the one being left.
func (c *controller) left(attempt int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return attempt == c.movedFrom
}

// attemptStarted resets the observer for a new attempt; a cloud job whose
// relaunch did not get the configuration asked (asked) re-chooses over the
// offers now.
func (c *controller) attemptStarted(ctx context.Context, attempt int, cfg, asked plugins.Config) {
	c.mu.Lock()
	c.obs.attemptStarted(attempt, cfg)
	c.mu.Unlock()
	if c.cloud != nil && asked != (plugins.Config{}) && asked != cfg {
		c.rechoose(ctx, "the relaunch did not get what it asked") // the next report decides with it
	}
}

// observe takes one step record and, when a report is due, asks the policy.
func (c *controller) observe(rec telemetry.StepRecord, cfg plugins.Config) (api.Decision, bool) {
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
		c.prog.setNoise(c.obs.est.NoiseScale(c.obs.m0))
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
	return dec
}
