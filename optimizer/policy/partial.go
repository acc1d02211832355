package policy

import (
	"fmt"
	"math"
	"sort"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/perf"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// Partial-search tuning (the scavenger policy).
const (
	// searchShare: a probe of another machine type may cost (its relaunch)
	// at most this fraction of the best predicted remaining time (or cost)
	// it could improve on.
	searchShare = 0.1
	// searchGain is the fraction of the remaining time a search is assumed
	// to save before anything is fitted: the search runs only when its
	// relaunches cost less than that.
	searchGain = 0.5
)

// partial is the paper's partial search generalised to machine types
// without probing every type's extremes:
//
//  1. Wait until the noise estimate is stable (as the paper does; not for a
//     throughput-only job).
//  2. If the search's relaunches (corners, one per other type, the final
//     move) would take more than searchGain of the time the job still needs
//     in its current configuration, searching does not pay: stay for good.
//  3. Probe the extreme configurations of (K, B) on the start type — the
//     smallest and largest K, each at its smallest and largest batch (see
//     cornerProbes for degenerate corners) — and fit that type's model
//     (Pollux's form with four points).
//  4. Transfer the fitted shape to every other type: the shape is a function
//     of (nodes, K, local batch), and a candidate of another type carries
//     its own node count (from the catalog's GPUs per node), so only a speed
//     factor is unknown. That factor does not change the ranking inside a
//     type, so the type's best candidate under the shape is probed, once,
//     which measures the factor. Other types are probed only while the
//     probes' relaunches stay within searchShare of the best predicted
//     remaining time (or cost) on the types already measured.
//  5. Fit (start type) and scale (other types), choose for the objective,
//     move once, and stop.
type partial struct {
	t      *tracker
	phase  phase
	start  string
	probes []predict.Candidate
	others []string
	final  Decision
	stayed string
}

// Name implements Policy.
func (p *partial) Name() string { return "scavenger" }

// Models implements ModelSource: the fitted start type and the transferred
// shapes of the probed types.
func (p *partial) Models() map[string]predict.StepTimer {
	t := p.t
	t.transfer = true
	if models, _, err := t.fit(); err == nil {
		return models
	}
	return t.baseModels()
}

// Observe implements Policy.
func (p *partial) Observe(o Observation) (Decision, error) { return p.t.label(p.observe(o)) }

func (p *partial) observe(o Observation) (Decision, error) {
	t := p.t
	t.transfer = true
	if err := t.observe(o); err != nil {
		return Decision{}, err
	}
	switch p.phase {
	case phaseWarm:
		if !t.warm() {
			return t.warmingUp(t.warmReason()), nil
		}
		p.start = o.Config.Type
		p.probes = cornerProbes(t.spec.Candidates, o.Config.Type)
		// The search's relaunches: the corners other than the current
		// configuration, one probe per other type, and the final move.
		n := len(p.probes) + len(t.types)
		if contains(p.probes, o.Config) {
			n--
		}
		if why, ok := p.pays(o, n); !ok {
			p.phase, p.stayed = phaseDone, why
			return t.stay(why), nil
		}
		for _, typ := range typeOrder(t.spec.Candidates, o.Config) {
			if typ != p.start {
				p.others = append(p.others, typ)
			}
		}
		p.phase = phaseProbe
		fallthrough
	case phaseProbe:
		if !t.measured(o.Config) && contains(p.probes, o.Config) {
			return t.waitToMeasure(fmt.Sprintf("probing %s", o.Config)), nil
		}
		for i, c := range p.probes {
			if !t.measured(c) {
				return t.probe(c, fmt.Sprintf("scavenger search: probe %d of %d", i+1, len(p.probes))), nil
			}
		}
		models, _, err := t.fit()
		if err != nil {
			return Decision{}, fmt.Errorf("scavenger policy: %w", err)
		}
		// One transferred probe per other type, budgeted.
		for len(p.others) > 0 {
			typ := p.others[0]
			p.others = p.others[1:]
			c, ok, err := p.transferProbe(models, typ)
			if err != nil {
				return Decision{}, err
			}
			if !ok {
				continue
			}
			p.probes = append(p.probes, c)
			if c == o.Config {
				return t.waitToMeasure(fmt.Sprintf("probing %s", o.Config)), nil
			}
			return t.probe(c, fmt.Sprintf("scavenger search: one probe of type %s at its best configuration under the %s shape", typ, p.start)), nil
		}
		d, err := t.decide(models)
		if err != nil {
			return Decision{}, fmt.Errorf("scavenger policy: %w", err)
		}
		d.Reason = fmt.Sprintf("scavenger search over %d probes: %s", len(p.probes), d.Reason)
		p.final = d
		p.phase = phaseDone
		return d, nil
	default:
		if p.stayed != "" {
			return t.stay(p.stayed), nil
		}
		return t.stay("search finished; staying (" + p.final.Reason + ")"), nil
	}
}

// pays says whether a search of n relaunches can pay: they must cost less
// than the searchGain fraction of the time the job needs in its current
// configuration.
func (p *partial) pays(o Observation, n int) (string, bool) {
	t := p.t
	m := t.meas[o.Config]
	gain := t.gain(float64(o.Config.Batch) / t.spec.M0)
	remS := math.Max(t.spec.Target-o.Progress, 0) / gain * m.step
	if float64(n)*t.spec.RelaunchS > searchGain*remS {
		return fmt.Sprintf("search does not pay: %d relaunches of %.0f s against %.0f s left here", n, t.spec.RelaunchS, remS), false
	}
	return "", true
}

// transferProbe picks the best candidate of typ under the start type's
// fitted shape, unless probing it cannot pay: its relaunch (billed at its
// nodes for least cost) must stay within searchShare of the best predicted
// remainder on the measured types.
func (p *partial) transferProbe(models map[string]predict.StepTimer, typ string) (predict.Candidate, bool, error) {
	t := p.t
	ref, ok := models[p.start].(measuredOver)
	if !ok {
		return predict.Candidate{}, false, nil
	}
	base, ok := ref.base.(*perf.Fitted)
	if !ok || base.Configs < 3 {
		return predict.Candidate{}, false, nil
	}
	measured, err := t.predict(models)
	if err != nil {
		return predict.Candidate{}, false, fmt.Errorf("scavenger policy: %w", err)
	}
	ch, err := t.choose(measured)
	if err != nil {
		return predict.Candidate{}, false, fmt.Errorf("scavenger policy: %w", err)
	}
	best := measured[ch.Index]
	shape := map[string]predict.StepTimer{typ: perf.Transferred{Ref: base.Model, Factor: 1}}
	preds, err := t.predict(shape)
	if err != nil || len(preds) == 0 {
		return predict.Candidate{}, false, err
	}
	tc, err := t.choose(preds)
	if err != nil {
		return predict.Candidate{}, false, fmt.Errorf("scavenger policy: %w", err)
	}
	c := preds[tc.Index].Candidate
	cost := t.spec.RelaunchS
	budget := searchShare * best.RemainingS
	if t.spec.Objective.Kind == objective.Cost {
		cost *= float64(c.Nodes) * t.spec.Prices[typ] / 3600
		budget = searchShare * best.RemainingUSD
	}
	if cost > budget {
		return predict.Candidate{}, false, nil
	}
	return c, true, nil
}

// cornerProbes returns the extreme configurations of (K, B) on typ: the
// smallest and largest K, each at its smallest and largest batch. When
// those are fewer than four distinct configurations (an extreme K with a
// single feasible batch), the full node and then half of it, each at its
// largest batch, are added until there are four, so that the fit can tell
// compute from synchronisation.
func cornerProbes(cands []predict.Candidate, typ string) (out []predict.Candidate) {
	var of []predict.Candidate
	for _, c := range cands {
		if c.Type == typ {
			of = append(of, c)
		}
	}
	sort.Slice(of, func(i, j int) bool {
		if of[i].Workers != of[j].Workers {
			return of[i].Workers < of[j].Workers
		}
		return of[i].Batch < of[j].Batch
	})
	kmin, kmax := of[0].Workers, of[len(of)-1].Workers
	full := kmin
	for _, c := range of {
		if c.Nodes == 1 {
			full = max(full, c.Workers)
		}
	}
	// pick returns the smallest or largest batch of k (nil if none).
	pick := func(k int, largest bool) *predict.Candidate {
		var got *predict.Candidate
		for i := range of {
			if of[i].Workers == k && (got == nil || largest) {
				got = &of[i]
			}
		}
		return got
	}
	add := func(c *predict.Candidate) {
		if c != nil && !contains(out, *c) && len(out) < 4 {
			out = append(out, *c)
		}
	}
	order := []*predict.Candidate{pick(kmin, false), pick(kmin, true), pick(kmax, false), pick(kmax, true), pick(full, true), pick((kmin+full)/2, true)}
	for _, c := range order {
		add(c)
	}
	return out
}
