package policy

import (
	"fmt"
)

// partial is the paper's partial search, generalised to machine types and
// priced in the objective's units:
//
//  1. With Spec.StatModel "paper", run the two cold-start probes (the
//     smallest K at the smallest and largest batch) that the paper's
//     statistical model is fitted on.
//  2. Probe while a probe is worth more than it costs (tracker.nextProbe):
//     each type's identifiability design first — the paper's extremes of
//     (K, B) plus a full single node — then single candidates. A type never
//     measured is probed only if its optimistic (price-prior) prediction
//     can beat the incumbent by more than the probe costs; probing stops
//     when no candidate's interval reaches far enough below the incumbent.
//  3. Fit each type on its own measurements, predict with the noise
//     forecast, choose for the objective, move once. The paper waits for
//     the noise estimate to stabilise before it even probes; here probes
//     run at once (they measure step times, which do not wait on the
//     noise), and a decision taken before the estimate is reliable and its
//     forecast mature says so (Decision.Provisional).
//  4. Revisit once, when the forecast is mature and the chosen
//     configuration measured (oneShot), then stop.
type partial struct {
	t      *tracker
	phase  phase
	probed int
	once   oneShot
}

// Name implements Policy.
func (p *partial) Name() string { return "scavenger" }

// Observe implements Policy.
func (p *partial) Observe(o Observation) (Decision, error) { return p.t.label(p.observe(o)) }

func (p *partial) observe(o Observation) (Decision, error) {
	t := p.t
	if err := t.observe(o); err != nil {
		return Decision{}, err
	}
	switch p.phase {
	case phaseWarm, phaseProbe:
		if !t.measured(o.Config) {
			return t.waitToMeasure(fmt.Sprintf("measuring %s", o.Config)), nil
		}
		if c, ok := t.nextColdStart(); ok {
			p.probed++
			return t.probe(c, fmt.Sprintf("scavenger search: cold-start probe %s for the paper's statistical model", c)), nil
		}
		ms, err := t.fit()
		if err != nil {
			return Decision{}, fmt.Errorf("scavenger policy: %w", err)
		}
		preds, err := t.predict(ms.models)
		if err != nil {
			return Decision{}, fmt.Errorf("scavenger policy: %w", err)
		}
		if opt, ok := t.nextProbe(preds); ok {
			p.probed++
			p.phase = phaseProbe
			d := t.probeOf(fmt.Sprintf("scavenger search, probe %d", p.probed), opt)
			d.Predictions, d.FittedTypes = preds, ms.fitted // what the probe will be held to
			return d, nil
		}
		p.phase = phaseChosen
		return p.once.decide(t, o, func() (typeModels, error) { return ms, nil }, fmt.Sprintf("scavenger search over %d probes", p.probed))
	default:
		return p.once.revisit(t, o, t.fit)
	}
}
