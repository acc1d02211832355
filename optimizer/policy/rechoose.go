package policy

import (
	"fmt"
	"slices"

	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// Re-choosing over a changed search space
//
// The offers a job can buy change while it runs: a spot market goes (a
// pre-emption), a type runs out of capacity, prices move. Rechoose hands
// the policy the search space and prices now; the policy keeps what it has
// learnt — the measurements, the noise estimate and its forecast, the
// measured relaunches, where it is in its search — and re-decides from its
// own models and the job's state. A forced re-choice is one the job must
// relaunch for whatever it chooses (its machines are being taken): every
// candidate pays a relaunch, the current one included, and no hysteresis
// holds it where it is. Otherwise the current configuration keeps its
// advantage, and a move must beat it by the margin (hysteresis).

// typesOf lists the machine types of cands in their order.
func typesOf(cands []predict.Candidate) []string {
	var types []string
	for _, c := range cands {
		if !slices.Contains(types, c.Type) {
			types = append(types, c.Type)
		}
	}
	return types
}

// respec replaces the search space and its prices; what the job measured
// and its noise estimate stay.
func (t *tracker) respec(spec Spec) error {
	if err := spec.validate(); err != nil {
		return fmt.Errorf("re-choose: %w", err)
	}
	t.spec, t.types, t.designs = spec, typesOf(spec.Candidates), nil
	return nil
}

// rechoose re-decides over spec with the models fit gives, from where the
// job is (see the comment above); before the first report there is
// nothing to decide on (ErrNotObserved).
func (t *tracker) rechoose(spec Spec, forced bool, fit func() (typeModels, error)) (Decision, error) {
	if err := t.respec(spec); err != nil {
		return Decision{}, err
	}
	if t.reports == 0 {
		return Decision{}, fmt.Errorf("re-choose: %w", ErrNotObserved)
	}
	ms, err := fit()
	if err != nil {
		return Decision{}, fmt.Errorf("re-choose: %w", err)
	}
	cur := t.last.Config
	if forced {
		cur = predict.Candidate{} // every candidate pays the relaunch
	}
	d, err := t.decideAt(ms, cur)
	if err != nil {
		return Decision{}, fmt.Errorf("re-choose: %w", err)
	}
	if !forced && slices.Contains(t.spec.Candidates, t.last.Config) {
		d = t.hysteresis(d, t.last)
	}
	if d.Config != t.last.Config {
		d.WaitSteps = t.spec.ProbeSteps
	}
	how := "re-chosen over the offers now"
	if forced {
		how = "re-chosen over the offers now (the job must relaunch)"
	}
	d.Reason = how + ": " + d.Reason
	return d, nil
}

// Rechoose implements Policy: a fixed job stays.
func (p *fixed) Rechoose(spec Spec, _ bool) (Decision, error) {
	if err := p.t.respec(spec); err != nil {
		return Decision{}, err
	}
	return p.t.label(p.t.stay("fixed configuration"), nil)
}

// Rechoose implements Policy; a search that has chosen keeps the
// re-choice as its choice.
func (p *search) Rechoose(spec Spec, forced bool) (Decision, error) {
	d, err := p.t.rechoose(spec, forced, p.t.fit)
	if err == nil && p.phase >= phaseChosen {
		p.once.final = d
	}
	return p.t.label(d, err)
}

// Rechoose implements Policy; a search that has chosen keeps the
// re-choice as its choice.
func (p *partial) Rechoose(spec Spec, forced bool) (Decision, error) {
	d, err := p.t.rechoose(spec, forced, p.t.fit)
	if err == nil && p.phase >= phaseChosen {
		p.once.final = d
	}
	return p.t.label(d, err)
}

// Rechoose implements Policy with the stored models.
func (p *none) Rechoose(spec Spec, forced bool) (Decision, error) {
	d, err := p.t.rechoose(spec, forced, p.fit)
	if err == nil && p.decided {
		p.once.final = d
	}
	return p.t.label(d, err)
}

// Rechoose implements Policy: the re-choice is a move like any other
// (refitted, it replaces the plan; one to a measured configuration dwells).
func (p *adaptive) Rechoose(spec Spec, forced bool) (Decision, error) {
	d, err := p.t.rechoose(spec, forced, func() (typeModels, error) {
		ms, err := p.t.fit()
		p.models, p.fitted = ms, 0 // refitted at the next report
		return ms, err
	})
	if err != nil {
		return p.t.label(d, err)
	}
	if d.Config != p.t.last.Config {
		p.moved = p.t.measured(d.Config)
		p.committed, p.jcts = false, p.jcts[:0]
	}
	return p.t.label(d, nil)
}
