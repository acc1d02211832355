package control

import (
	"fmt"
	"math"
	"reflect"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/plugins"
)

// The machine type of a job on a launcher that acquires machines
//
// When the job's launcher offers machine types (plugins.Capabilities.Offers:
// cloudvm), its controller searches type × K × B with the same policy code
// as on one node and in the simulator: the search space is
// CloudSpec (space.go) over the types the job allows, each priced in the
// market it would be bought in now (spot when allowed and offered), and a
// decision names the type, its market and its machines. The cost the
// policy sees spent is what the launcher bills (plugins.Biller): its runner
// hands the controller the charges of the job's machines, and the offers
// at each attempt and at a notice, so that it never calls the launcher.
//
// The offers change: a spot interruption blocklists the (type, zone, spot)
// that was reclaimed, a capacity error the offering that had none. At a
// pre-emption notice the controller re-chooses (Rechoose): it rebuilds the search
// space from the offers now and replays the job's observations into a new
// policy of the same kind (policies are deterministic functions of their
// observations), whose last decision is where the job goes — another type,
// count or batch when the reclaimed market no longer pays, on demand when
// spot is gone. A relaunch that did not get the configuration it asked for
// (no capacity) is re-chosen the same way.

// cloudSpace is a cloud job's search space, the offers it was built from,
// the newest offers its runner handed the controller, and the charges of
// the job's machines.
type cloudSpace struct {
	opt     api.Optimize
	start   plugins.Config
	cur     Cloud
	seen    []plugins.Offer // what cur was built from
	offers  []plugins.Offer // the newest offers
	charges []plugins.Charge
	now     func() time.Time
}

// newCloudSpace is the search space of j over offers, or nil when there
// are none (the launcher offers no machine types).
func newCloudSpace(j api.Job, offers []plugins.Offer) (*cloudSpace, error) {
	if len(offers) == 0 {
		return nil, nil
	}
	cs := &cloudSpace{opt: j.Optimize, start: j.Config, offers: offers, now: time.Now}
	if _, err := cs.refresh(offers); err != nil {
		return nil, err
	}
	return cs, nil
}

// spent is what the job's machines have cost by now, when their charges
// are known.
func (cs *cloudSpace) spent(float64) (float64, bool) {
	if len(cs.charges) == 0 {
		return 0, false
	}
	now, usd := cs.now(), 0.0
	for _, c := range cs.charges {
		usd += c.CostUSD(now) // with the rounding and the minimum of an ended machine
	}
	return usd, true
}

// SetOffers hands the controller the machine types the launcher offers now
// (a cloud job's runner does at each attempt and at a pre-emption notice).
func (c *Controller) SetOffers(offers []plugins.Offer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cloud != nil && offers != nil {
		c.cloud.offers = offers
	}
}

// SetCharges hands the controller the charges of the job's machines, from
// which it knows what the job has spent.
func (c *Controller) SetCharges(charges []plugins.Charge) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cloud != nil {
		c.cloud.charges = charges
	}
}

// refresh rebuilds the search space from offers; changed reports whether
// the offers differ from those it was built from.
func (cs *cloudSpace) refresh(offers []plugins.Offer) (changed bool, err error) {
	if cs.seen != nil && reflect.DeepEqual(offers, cs.seen) {
		return false, nil
	}
	cl, err := CloudSpec(cs.opt, cs.start, offers)
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

// Rechoose rebuilds the search space when the offers the runner handed it
// last differ from those it was built from, and replays the job's
// observations into a new policy; it returns where the job goes now (ok
// false: nothing to re-choose, or it failed and the policy goes on as it
// was). why says what prompted it, for the decision's reason.
func (c *Controller) Rechoose(why string) (api.Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rechoose(why)
}

// rechoose is Rechoose with c.mu held.
func (c *Controller) rechoose(why string) (api.Decision, bool) {
	if c.cloud == nil || len(c.history) == 0 {
		return api.Decision{}, false
	}
	if changed, err := c.cloud.refresh(c.cloud.offers); err != nil || !changed {
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
	_, cfg := c.job.Current()
	if now, ok := c.chooseNow(); ok {
		d = now // the policy's models, priced now; the replay's last word may predate the change
	}
	dec := decision(cfg, c.job.LastStep(), time.Now().UTC(), d)
	dec.To = c.cloud.cur.Config(d.Config, cfg.LRScale)
	dec.Reason = why + "; re-chosen over the offers now: " + dec.Reason
	c.log.Info("re-chose", zap.String("why", why), zap.String("to", fmt.Sprintf("%+v", dec.To)))
	return dec, true
}

// chooseNow re-evaluates every candidate with the policy's fitted models
// (policy.ModelSource) at the prices of the search space now, from where
// the job is (its progress, noise estimate, time and money left), as the
// policies' own choice does; ok is false when the policy has no models yet.
func (c *Controller) chooseNow() (policy.Decision, bool) {
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
