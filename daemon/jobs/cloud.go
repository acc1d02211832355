package jobs

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/control"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// The machine type of a job on a launcher that acquires machines
//
// When the job's launcher offers machine types (plugins.Capabilities.Offers:
// cloudvm), its controller searches type × K × B with the same policy code
// as on one node and in the simulator: the search space is
// control.CloudSpec over the types the job allows, each priced in the
// market it would be bought in now (spot when allowed and offered), and a
// decision names the type, its market and its machines. The cost the
// policy sees spent is what the launcher bills (plugins.Biller).
//
// The offers change: a spot interruption blocklists the (type, zone, spot)
// that was reclaimed, a capacity error the offering that had none. At a
// pre-emption notice the controller re-chooses: it rebuilds the search
// space from the offers now and replays the job's observations into a new
// policy of the same kind (policies are deterministic functions of their
// observations), whose last decision is where the job goes — another type,
// count or batch when the reclaimed market no longer pays, on demand when
// spot is gone. A relaunch that did not get the configuration it asked for
// (no capacity) is re-chosen the same way.

// cloudSpace is a cloud job's search space and how it is refreshed.
type cloudSpace struct {
	opt    api.Optimize
	start  plugins.Config
	offers func(ctx context.Context) ([]plugins.Offer, error)
	spent  func(ctx context.Context) (float64, bool)
	cur    control.Cloud
	seen   []plugins.Offer
}

// offersOf returns the launcher's offers, or nil when it offers none.
func offersOf(ctx context.Context, l plugins.Launcher) ([]plugins.Offer, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	caps, err := l.Capabilities(ctx)
	if err != nil {
		return nil, fmt.Errorf("launcher capabilities: %w", err)
	}
	return caps.Offers, nil
}

// newCloudSpace is the search space of j on launcher l, or nil when l
// offers no machine types.
func newCloudSpace(ctx context.Context, j api.Job, l plugins.Launcher) (*cloudSpace, error) {
	offers, err := offersOf(ctx, l)
	if err != nil || len(offers) == 0 {
		return nil, err
	}
	cs := &cloudSpace{opt: j.Optimize, start: j.Config, offers: func(ctx context.Context) ([]plugins.Offer, error) { return offersOf(ctx, l) }}
	if b, ok := l.(plugins.Biller); ok {
		cs.spent = func(ctx context.Context) (float64, bool) {
			ctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			charges, err := b.Charges(ctx, j.ID)
			if err != nil || len(charges) == 0 {
				return 0, false
			}
			return attemptCost(charges, time.Time{}, time.Time{}, time.Now()).USD, true
		}
	}
	if _, err := cs.refresh(offers); err != nil {
		return nil, err
	}
	return cs, nil
}

// refresh rebuilds the search space from offers; changed reports whether
// the offers differ from those it was built from.
func (cs *cloudSpace) refresh(offers []plugins.Offer) (changed bool, err error) {
	if cs.seen != nil && reflect.DeepEqual(offers, cs.seen) {
		return false, nil
	}
	cl, err := control.CloudSpec(cs.opt, cs.start, offers)
	if err != nil {
		return false, err
	}
	cs.cur, cs.seen = cl, offers
	return true, nil
}

// startType is the type a configuration that names none runs on.
func (cs *cloudSpace) startType() string {
	if cs.start.MachineType != "" {
		return cs.start.MachineType
	}
	return cs.cur.Spec.Candidates[0].Type
}

// toConfig is the launcher's configuration for candidate c decided while
// the job runs at cfg: cfg itself when c is where it runs (staying never
// moves it, whatever the market of its machines), else c bought in its
// type's market now.
func (cs *cloudSpace) toConfig(c predict.Candidate, cfg plugins.Config) plugins.Config {
	if c == cs.cur.Candidate(cfg, cs.startType()) {
		return cfg
	}
	return cs.cur.Config(c, cfg.LRScale)
}

// rechoose re-reads the offers and, when they changed, rebuilds the search
// space and replays the job's observations into a new policy; it returns
// the replayed policy's last decision (ok false: nothing to re-choose, or
// it failed and the policy goes on as it was).
func (c *controller) rechoose(ctx context.Context, why string) (api.Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cloud == nil || len(c.history) == 0 {
		return api.Decision{}, false
	}
	offers, err := c.cloud.offers(ctx)
	if err != nil {
		c.log.Warn("re-choose: offers", zap.Error(err))
		return api.Decision{}, false
	}
	if changed, err := c.cloud.refresh(offers); err != nil || !changed {
		if err != nil {
			c.log.Warn("re-choose: search space", zap.Error(err))
		}
		return api.Decision{}, false
	}
	pol, err := policy.New(c.pol.Name(), c.cloud.cur.Spec, nil)
	if err != nil {
		c.log.Warn("re-choose: policy", zap.Error(err))
		return api.Decision{}, false
	}
	var d policy.Decision
	for _, o := range c.history {
		if d, err = pol.Observe(o); err != nil {
			c.log.Warn("re-choose: replay", zap.Error(err))
			return api.Decision{}, false
		}
	}
	c.pol = pol
	c.obs.setWait(d.WaitSteps)
	_, cfg := c.current()
	if now, ok := c.chooseNow(); ok {
		d = now // the policy's models, priced now; the replay's last word may predate the change
	}
	dec := decision(cfg, c.prog.now().LastStep, time.Now().UTC(), d)
	dec.To = c.cloud.cur.Config(d.Config, cfg.LRScale)
	dec.Reason = why + "; re-chosen over the offers now: " + dec.Reason
	c.log.Info("re-chose", zap.String("why", why), zap.String("to", fmt.Sprintf("%+v", dec.To)))
	return dec, true
}

// rechooseAfterNotice is where a job whose workers got a pre-emption
// notice goes: its controller's re-choice over the offers now (the
// decision is recorded), or cfg, where it runs, as before.
func (r *runner) rechooseAfterNotice(ctx context.Context, rec telemetry.StepRecord, cfg plugins.Config) plugins.Config {
	if r.ctl == nil {
		return cfg
	}
	dec, ok := r.ctl.rechoose(ctx, fmt.Sprintf("pre-empted: rank %d received %s", rec.Rank, rec.ID))
	if !ok {
		return cfg
	}
	r.ctl.leaving(rec.Attempt)
	addDecision(&r.rec.job, dec)
	r.save(ctx)
	r.decided(rec.Attempt, dec)
	return dec.To
}

// chooseNow re-evaluates every candidate with the policy's fitted models
// (policy.ModelSource) at the prices of the search space now, from where
// the job is (its progress, noise estimate, time and money left), as the
// policies' own choice does; ok is false when the policy has no models yet.
func (c *controller) chooseNow() (policy.Decision, bool) {
	ms, ok := c.pol.(policy.ModelSource)
	if !ok || len(c.history) == 0 {
		return policy.Decision{}, false
	}
	models := ms.Models()
	if len(models) == 0 {
		return policy.Decision{}, false
	}
	spec, last := c.cloud.cur.Spec, c.history[len(c.history)-1]
	in := predict.Inputs{Models: models, Prices: spec.Prices, M0: spec.M0, Sqr: 0, Var: 1, Remaining: math.Max(spec.Target-last.Progress, 0),
		Current: last.Config, RelaunchS: spec.RelaunchS}
	if c.obs.est.Steps() > 0 {
		in.Sqr, in.Var = c.obs.est.Sqr(), c.obs.est.Var()
	}
	preds, err := predict.All(spec.Candidates, in)
	if err != nil || len(preds) == 0 {
		return policy.Decision{}, false
	}
	o := spec.Objective
	if o.DeadlineS > 0 {
		o.DeadlineS = math.Max(o.DeadlineS-last.ElapsedS, 1e-9)
	}
	if o.BudgetUSD > 0 {
		o.BudgetUSD = math.Max(o.BudgetUSD-last.SpentUSD, 1e-9)
	}
	ch, err := objective.Choose(preds, o)
	if err != nil {
		return policy.Decision{}, false
	}
	return policy.Decision{Config: preds[ch.Index].Candidate, Reason: ch.Reason, Phase: policy.PhaseOptimised, Predictions: preds, Chosen: ch.Index}, true
}

// workersText says how many workers cfg has, and on what machines when it
// names them: "2 workers", "2 workers on loc.full (spot)".
func workersText(cfg plugins.Config) string {
	s := fmt.Sprintf("%d workers", cfg.Workers)
	if cfg.MachineType != "" {
		s += " on " + cfg.MachineType
		if cfg.Market != "" {
			s += " (" + cfg.Market + ")"
		}
	}
	return s
}
