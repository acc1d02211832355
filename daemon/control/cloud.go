package control

import (
	"fmt"
	"reflect"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
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
// pre-emption notice the controller re-chooses (Rechoose): it rebuilds the
// search space from the offers now and hands it to the policy, which
// re-decides from its models and the job's state (policy.Policy.Rechoose)
// — another type, count or batch when the reclaimed market no longer pays,
// on demand when spot is gone. A relaunch that did not get the
// configuration it asked for (no capacity) is re-chosen the same way, but
// not forced: the job runs, and moves only if that pays.

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

// spentUSD is spent now, 0 when the charges are not known: what a
// decision records of the job's spend.
func (cs *cloudSpace) spentUSD() float64 {
	usd, _ := cs.spent(0)
	return usd
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
// last differ from those it was built from, and hands it to the policy,
// which re-decides from its models and the job's state
// (policy.Policy.Rechoose); it returns where the job goes now (ok false:
// nothing to re-choose, or it failed and the policy goes on as it was).
// why says what prompted it, for the decision's reason; forced that the
// job must relaunch whatever is chosen (its machines are being taken).
func (c *Controller) Rechoose(why string, forced bool) (api.Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cloud == nil || !c.reported {
		return api.Decision{}, false
	}
	if changed, err := c.cloud.refresh(c.cloud.offers); err != nil || !changed {
		if err != nil {
			c.log.Warn("re-choose: search space", zap.Error(err))
		}
		return api.Decision{}, false
	}
	spec := c.cloud.cur.Spec
	spec.Prior = c.store.prior
	d, err := c.loop.Pol.Rechoose(spec, forced)
	if err != nil {
		c.log.Warn("re-choose", zap.Error(err))
		return api.Decision{}, false
	}
	c.loop.Obs.Wait(d.WaitSteps)
	_, cfg := c.job.Current()
	dec := decision(cfg, c.job.LastStep(), time.Now().UTC(), d)
	dec.To, dec.SpentUSD = c.cloud.cur.Config(d.Config, cfg.LRScale), c.cloud.spentUSD()
	dec.Reason = why + "; " + dec.Reason
	c.log.Info("re-chose", zap.String("why", why), zap.String("to", fmt.Sprintf("%+v", dec.To)))
	return dec, true
}
