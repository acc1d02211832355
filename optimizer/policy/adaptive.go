package policy

import (
	"fmt"
	"math"
	"sort"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// Adaptive tuning.
const (
	// adaptiveMinSteps and adaptiveTol gate the first decision (looser than
	// the paper's: the estimate keeps being refined afterwards).
	adaptiveMinSteps = 50
	adaptiveTol      = 0.10
	// payoffFactor: no search when the job will finish within this many
	// relaunches anyway.
	payoffFactor = 20.0
	// probeBudget: probing may cost at most this fraction of the predicted
	// remaining time in relaunches.
	probeBudget = 0.04
)

// adaptive probes a few configurations per type while that can pay, then
// re-optimises at every report.
type adaptive struct {
	t        *tracker
	phase    phase
	probes   []predict.Candidate
	models   map[string]predict.StepTimer
	fitted   int // number of measured configurations behind models
	last     Decision
	noSearch bool
}

func (p *adaptive) Name() string { return "adaptive" }

func (p *adaptive) Observe(o Observation) (Decision, error) {
	t := p.t
	if err := t.observe(o); err != nil {
		return Decision{}, err
	}
	if p.phase == phaseWarm {
		if !t.stable(adaptiveMinSteps, adaptiveTol) && t.steps < warmMaxSteps {
			return t.stay("waiting for a first noise estimate"), nil
		}
		m := t.meas[o.Config]
		gain := t.est.Gain(float64(o.Config.Batch) / t.spec.M0)
		remS := math.Max(t.spec.Target-o.Progress, 0) / gain * m.step
		if remS < payoffFactor*t.spec.RelaunchS {
			p.phase, p.noSearch = phaseDone, true
			return t.stay(fmt.Sprintf("search does not pay: %.0f s left, relaunch %.0f s", remS, t.spec.RelaunchS)), nil
		}
		n := int(probeBudget * remS / (t.spec.RelaunchS + t.spec.ProbeSteps*m.step))
		p.probes = adaptiveProbes(t.spec.Candidates, o.Config, n)
		p.phase = phaseProbe
	}
	if p.phase == phaseProbe {
		if m := t.meas[o.Config]; !t.measured(o.Config) {
			d := t.stay(fmt.Sprintf("measuring %s", o.Config))
			d.WaitSteps = t.spec.ProbeSteps - m.steps
			return d, nil
		}
		for i, c := range p.probes {
			if !t.measured(c) {
				return Decision{Config: c, Reason: fmt.Sprintf("adaptive probe %d of %d", i+1, len(p.probes)), WaitSteps: t.spec.ProbeSteps, Chosen: -1}, nil
			}
		}
		p.phase = phaseDone
	}
	if p.noSearch {
		return t.stay("search does not pay; staying"), nil
	}
	return p.reoptimise(o)
}

// reoptimise refits when new configurations were measured, predicts every
// candidate and moves when the gain beats the relaunch by the margin.
func (p *adaptive) reoptimise(o Observation) (Decision, error) {
	t := p.t
	if !t.measured(o.Config) {
		d := t.stay(fmt.Sprintf("measuring %s", o.Config))
		d.WaitSteps = t.spec.ProbeSteps - t.meas[o.Config].steps
		return d, nil
	}
	n := 0
	for c := range t.meas {
		if t.measured(c) {
			n++
		}
	}
	if p.models == nil || n != p.fitted {
		models, _, err := t.fit()
		if err != nil {
			return Decision{}, fmt.Errorf("adaptive policy: %w", err)
		}
		p.models, p.fitted = models, n
	} else {
		// Refresh the overlay of the current configuration's measurement.
		for typ, m := range p.models {
			if typ == o.Config.Type {
				p.models[typ] = t.overlay(typ, m.(measuredOver).base)
			}
		}
	}
	d, err := t.decide(p.models)
	if err != nil {
		return Decision{}, fmt.Errorf("adaptive policy: %w", err)
	}
	cur := -1
	for i, pr := range d.Predictions {
		if pr.Candidate == o.Config {
			cur = i
		}
	}
	if d.Config == o.Config || cur < 0 {
		d.Reason = "stay: " + d.Reason
		p.last = d
		return d, nil
	}
	if !p.worthMoving(d.Predictions[cur], d.Predictions[d.Chosen]) {
		stay := t.stay(fmt.Sprintf("stay: %s does not beat %s by %.0f%% after the relaunch", d.Predictions[d.Chosen].Candidate, o.Config, 100*t.spec.Margin))
		stay.Predictions, stay.Chosen = d.Predictions, cur
		p.last = stay
		return stay, nil
	}
	d.Reason = "move: " + d.Reason
	d.WaitSteps = t.spec.ProbeSteps
	p.last = d
	return d, nil
}

// worthMoving applies the hysteresis: the candidate must beat staying by the
// margin in the objective's terms, relaunch included; a candidate that meets
// a deadline or budget the current one breaks always wins.
func (p *adaptive) worthMoving(cur, next predict.Prediction) bool {
	o := p.t.spec.Objective
	m := p.t.spec.Margin
	if o.DeadlineS > 0 {
		left := o.DeadlineS - p.t.last.ElapsedS
		if cur.TotalS > left && next.TotalS <= left {
			return true
		}
	}
	if o.BudgetUSD > 0 {
		left := o.BudgetUSD - p.t.last.SpentUSD
		if cur.TotalUSD > left && next.TotalUSD <= left {
			return true
		}
	}
	switch o.Kind {
	case objective.Time:
		return next.TotalS < cur.TotalS*(1-m)
	case objective.Cost:
		return next.TotalUSD < cur.TotalUSD*(1-m)
	default:
		if cur.TotalS <= 0 || cur.TotalUSD <= 0 {
			return false
		}
		return next.TotalS/cur.TotalS+next.TotalUSD/cur.TotalUSD < 2*(1-m)
	}
}

// adaptiveProbes picks at most n probes, round-robin across types (current
// type first), in an order that identifies the Pollux form soonest: the
// largest configuration at its largest batch, one full node at its largest
// and smallest batch, then two nodes.
func adaptiveProbes(cands []predict.Candidate, current predict.Candidate, n int) []predict.Candidate {
	if n <= 0 {
		return nil
	}
	per := map[string][]predict.Candidate{}
	types := typeOrder(cands, current)
	for _, typ := range types {
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
		// of is sorted by K then B: the first match has the smallest B.
		atK := func(match func(predict.Candidate) bool, largestB bool) *predict.Candidate {
			var got *predict.Candidate
			for i := range of {
				if match(of[i]) && (got == nil || largestB) {
					got = &of[i]
				}
			}
			return got
		}
		maxK := of[len(of)-1].Workers
		fullNode := 0
		twoNode := 0
		for _, c := range of {
			if c.Nodes == 1 {
				fullNode = max(fullNode, c.Workers)
			}
			if c.Nodes == 2 && twoNode == 0 {
				twoNode = c.Workers
			}
		}
		order := []*predict.Candidate{
			atK(func(c predict.Candidate) bool { return c.Workers == maxK }, true),
			atK(func(c predict.Candidate) bool { return c.Nodes == 1 && c.Workers == fullNode }, true),
			atK(func(c predict.Candidate) bool { return c.Nodes == 1 && c.Workers == fullNode }, false),
			atK(func(c predict.Candidate) bool { return c.Workers == twoNode }, true),
			atK(func(c predict.Candidate) bool { return c.Workers == maxK }, false),
		}
		for _, c := range order {
			if c != nil && !contains(per[typ], *c) && *c != current {
				per[typ] = append(per[typ], *c)
			}
		}
	}
	var out []predict.Candidate
	for round := 0; len(out) < n; round++ {
		added := false
		for _, typ := range types {
			if round < len(per[typ]) && len(out) < n {
				out = append(out, per[typ][round])
				added = true
			}
		}
		if !added {
			break
		}
	}
	return out
}
