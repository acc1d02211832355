package policy

import (
	"fmt"

	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// Warm-up: the noise estimate is stable when φ moved by less than stableTol
// over three consecutive reports after stableMinSteps steps; searches start
// after warmMaxSteps steps regardless (the paper waits 2K–10K iterations).
const (
	stableMinSteps = 100
	stableTol      = 0.05
	warmMaxSteps   = 2000
)

type phase int

const (
	phaseWarm phase = iota
	phaseProbe
	phaseDone
)

// search is the probe-then-choose policy of full (scavenger's partial
// search is partial.go).
type search struct {
	t      *tracker
	name   string
	plan   func(cands []predict.Candidate, current predict.Candidate) []predict.Candidate
	phase  phase
	probes []predict.Candidate
	final  Decision
}

// Name implements Policy.
func (p *search) Name() string { return p.name }

// Observe implements Policy.
func (p *search) Observe(o Observation) (Decision, error) { return p.t.label(p.observe(o)) }

func (p *search) observe(o Observation) (Decision, error) {
	t := p.t
	if err := t.observe(o); err != nil {
		return Decision{}, err
	}
	switch p.phase {
	case phaseWarm:
		if !t.warm() {
			return t.warmingUp(t.warmReason()), nil
		}
		p.probes = p.plan(t.spec.Candidates, o.Config)
		p.phase = phaseProbe
		fallthrough
	case phaseProbe:
		if !t.measured(o.Config) && contains(p.probes, o.Config) {
			return t.waitToMeasure(fmt.Sprintf("probing %s", o.Config)), nil
		}
		done := 0
		for _, c := range p.probes {
			if t.measured(c) {
				done++
			}
		}
		for _, c := range p.probes {
			if !t.measured(c) {
				return t.probe(c, fmt.Sprintf("%s search: probe %d of %d", p.name, done+1, len(p.probes))), nil
			}
		}
		models, _, err := t.fit()
		if err != nil {
			return Decision{}, fmt.Errorf("%s policy: %w", p.name, err)
		}
		d, err := t.decide(models)
		if err != nil {
			return Decision{}, fmt.Errorf("%s policy: %w", p.name, err)
		}
		d.Reason = fmt.Sprintf("%s search over %d probes: %s", p.name, len(p.probes), d.Reason)
		p.final = d
		p.phase = phaseDone
		return d, nil
	default:
		return t.stay("search finished; staying (" + p.final.Reason + ")"), nil
	}
}

func contains(cs []predict.Candidate, c predict.Candidate) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// typeOrder returns the types of cands, the current one first.
func typeOrder(cands []predict.Candidate, current predict.Candidate) []string {
	seen := map[string]bool{current.Type: true}
	out := []string{current.Type}
	for _, c := range cands {
		if !seen[c.Type] {
			seen[c.Type] = true
			out = append(out, c.Type)
		}
	}
	return out
}

// allProbes is full search: every candidate, current type first.
func allProbes(cands []predict.Candidate, current predict.Candidate) []predict.Candidate {
	var out []predict.Candidate
	for _, typ := range typeOrder(cands, current) {
		for _, c := range cands {
			if c.Type == typ {
				out = append(out, c)
			}
		}
	}
	return out
}

// none reuses stored step-time models: once the noise estimate is stable it
// predicts, chooses and stops, without probing.
type none struct {
	t      *tracker
	stored map[string]predict.StepTimer
	done   bool
	final  Decision
}

// Name implements Policy.
func (p *none) Name() string { return "none" }

// Observe implements Policy.
func (p *none) Observe(o Observation) (Decision, error) { return p.t.label(p.observe(o)) }

func (p *none) observe(o Observation) (Decision, error) {
	t := p.t
	if err := t.observe(o); err != nil {
		return Decision{}, err
	}
	if p.done {
		return t.stay("stored-model choice made; staying (" + p.final.Reason + ")"), nil
	}
	if !t.warm() {
		return t.warmingUp("waiting for the noise estimate to stabilise"), nil
	}
	models := map[string]predict.StepTimer{}
	for typ, m := range p.stored {
		models[typ] = t.overlay(typ, m)
	}
	d, err := t.decide(models)
	if err != nil {
		return Decision{}, fmt.Errorf("none policy: %w", err)
	}
	d.Reason = "stored model: " + d.Reason
	p.done, p.final = true, d
	return d, nil
}
