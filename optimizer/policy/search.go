package policy

import (
	"fmt"

	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

type phase int

const (
	phaseWarm phase = iota
	phaseProbe
	phaseChosen
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
	once   oneShot
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
		p.phase = phaseChosen
		return p.once.decide(t, o, t.fit, fmt.Sprintf("%s search over %d probes", p.name, len(p.probes)))
	default:
		return p.once.revisit(t, o, t.fit)
	}
}

// oneShot is how the decide-once policies (scavenger, full, none) end: one
// model-based decision, then one second look once the noise forecast is
// mature and the chosen configuration has been measured — the first
// decision is provisional when the forecast was not mature, and its
// configuration may have been predicted rather than measured. The second
// look moves again only if that beats staying by the margin after the
// relaunch, and commits the plan either way.
type oneShot struct {
	final     Decision
	revisited bool
	// probe lets the second look probe first where its mature forecast
	// makes that pay (scavenger, full; not none, which never probes).
	probe bool
}

// decide takes the one decision: the objective's choice, unless it does
// not beat a measured current configuration by the margin.
func (s *oneShot) decide(t *tracker, o Observation, fit func() (typeModels, error), who string) (Decision, error) {
	ms, err := fit()
	if err != nil {
		return Decision{}, fmt.Errorf("%s: %w", who, err)
	}
	d, err := t.decide(ms)
	if err != nil {
		return Decision{}, fmt.Errorf("%s: %w", who, err)
	}
	d = t.hysteresis(d, o)
	d.Reason = who + ": " + d.Reason
	if d.Config != o.Config {
		d.WaitSteps = t.spec.ProbeSteps
	}
	s.final = d
	return d, nil
}

// revisit is the one second look (see oneShot); before and after it the
// job stays.
func (s *oneShot) revisit(t *tracker, o Observation, fit func() (typeModels, error)) (Decision, error) {
	if s.revisited {
		return t.stay("search finished; staying (" + s.final.Reason + ")"), nil
	}
	if !t.forecastMature() || !t.measured(o.Config) {
		what := o.Config.String() + " is measured"
		if !t.forecastMature() {
			what = "the noise forecast is mature and " + what
		}
		d := t.stay("search finished; a second look once " + what + " (" + s.final.Reason + ")")
		if !t.measured(o.Config) {
			d.WaitSteps = t.spec.ProbeSteps
		}
		return d, nil
	}
	ms, err := fit()
	if err != nil {
		return Decision{}, fmt.Errorf("revisit: %w", err)
	}
	if s.probe {
		// The mature forecast may put the best where the first look's did
		// not: probe there first if that pays (tracker.nextProbe).
		preds, err := t.predict(ms.models)
		if err != nil {
			return Decision{}, fmt.Errorf("revisit: %w", err)
		}
		if opt, ok := t.nextProbe(preds); ok {
			d := t.probe(opt.c, t.probeReason("second look, probe", opt))
			d.Predictions, d.FittedTypes = preds, ms.fitted
			return d, nil
		}
	}
	s.revisited = true
	d, err := t.decide(ms)
	if err != nil {
		return Decision{}, fmt.Errorf("revisit: %w", err)
	}
	d = t.hysteresis(d, o)
	d.Commit = true
	d.Reason = "second look, measured and mature: " + d.Reason
	s.final = d
	return d, nil
}

// hysteresis keeps a measured current configuration unless d's choice
// beats it by the margin after the relaunch (see worthMoving); the
// decision then keeps the predictions, pointing at the current one.
func (t *tracker) hysteresis(d Decision, o Observation) Decision {
	if d.Config == o.Config || !t.measured(o.Config) {
		return d
	}
	cur := -1
	for i, pr := range d.Predictions {
		if pr.Candidate == o.Config {
			cur = i
		}
	}
	if cur < 0 || t.worthMoving(d.Predictions[cur], d.Predictions[d.Chosen]) {
		return d
	}
	d.Reason = fmt.Sprintf("stay: %s does not beat %s by %.0f%% after the relaunch (%s)", d.Config, o.Config, 100*t.spec.Margin, d.Reason)
	d.Config, d.Chosen = o.Config, cur
	return d
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

// none is the paper's no-search: it reuses what earlier jobs of the same
// signature measured (Spec.Prior) and never probes. Once the noise
// estimate is reliable (at once with a stored noise curve) it predicts and
// chooses, then revisits once (oneShot).
type none struct {
	t       *tracker
	decided bool
	once    oneShot
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
	if p.decided {
		return p.once.revisit(t, o, p.fit)
	}
	if !t.warm() {
		return t.warmingUp(t.warmReason()), nil
	}
	p.decided = true
	return p.once.decide(t, o, p.fit, "stored model")
}

// fit is the models of the stored measurements and the job's own.
func (p *none) fit() (typeModels, error) { return p.t.fit() }
