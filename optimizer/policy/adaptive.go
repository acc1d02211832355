package policy

import (
	"fmt"
	"math"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// Adaptive tuning.
const (
	// dwellFactor: after a move, stay at least this many relaunches' worth
	// of time before the next move, so that noisy telemetry cannot make the
	// job oscillate. Each move back to a configuration a move left doubles
	// it (up to maxReversals times): a job whose estimates swing between two
	// configurations stays ever longer in each, instead of paying a
	// relaunch at every swing (a live job went 128 → 64 → 128 → 32 → 128 →
	// 64 → 128 in batch on one machine, a relaunch every 30 s).
	dwellFactor  = 10.0
	maxReversals = 6
	// commitReports and commitTol: the plan is committed once the noise
	// forecast is mature and the whole-job prediction of the chosen
	// configuration has stayed within commitTol over commitReports reports.
	commitReports = 5
	commitTol     = 0.02
)

// adaptive probes while a probe is worth more than it costs
// (tracker.nextProbe), then re-optimises at every report with the noise
// forecast, moving only when the gain beats the relaunch by the margin.
type adaptive struct {
	t      *tracker
	probed int
	// arrived is when the job entered its current configuration; moved
	// says whether a model-based move has happened (moves, unlike probes,
	// must dwell).
	arrived float64
	moved   bool
	// left holds the configurations a move left; reversals counts the
	// moves back to one of them (see dwellFactor).
	left      map[predict.Candidate]bool
	reversals int
	models    typeModels
	fitted    int // measured configurations behind models
	// committed says whether the plan has been confirmed once the noise
	// forecast matured (see Observe).
	committed bool
	// jcts are the whole-job predictions of the current plan, one per
	// report since it was last changed.
	jcts []float64
}

// settled reports whether the last n values stay within tol of the
// latest.
func settled(xs []float64, n int, tol float64) bool {
	if len(xs) < n {
		return false
	}
	last := xs[len(xs)-1]
	for _, x := range xs[len(xs)-n:] {
		if math.Abs(x-last) > tol*last {
			return false
		}
	}
	return true
}

// Name implements Policy.
func (p *adaptive) Name() string { return "adaptive" }

// Observe implements Policy. The first model-based decision taken once the
// noise forecast is mature and its whole-job prediction has settled (see
// commitReports) is marked Commit: it re-predicts the job with the
// forecast the early decisions lacked, and its predictions are the plan's.
// A later move replaces the plan, which is committed again once its
// prediction settles.
func (p *adaptive) Observe(o Observation) (Decision, error) {
	return p.t.label(p.commit(o))
}

// commit is Observe without the throughput-only label: it marks the
// decision that commits the plan. A throughput-only job has no noise
// forecast to wait for; its plan is committed once its prediction settles.
func (p *adaptive) commit(o Observation) (Decision, error) {
	d, err := p.observe(o)
	if err != nil || d.Chosen < 0 && d.Config == o.Config && d.Phase != PhaseOptimised {
		return d, err
	}
	if d.Config != o.Config {
		// A move (or probe) replaces the plan: commit it again once settled.
		p.committed, p.jcts = false, p.jcts[:0]
		return d, nil
	}
	if p.committed {
		return d, nil
	}
	if d.Chosen < 0 || d.Chosen >= len(d.Predictions) || d.Predictions[d.Chosen].Candidate != d.Config {
		p.jcts = p.jcts[:0]
		return d, nil
	}
	p.jcts = append(p.jcts, o.ElapsedS+d.Predictions[d.Chosen].TotalS)
	if !settled(p.jcts, commitReports, commitTol) || !p.t.forecastMature() {
		return d, nil
	}
	d.Commit, p.committed, d.Provisional = true, true, false
	if p.t.throughputOnly() {
		d.Reason = "commit (prediction settled): " + d.Reason
	} else {
		d.Reason = "commit (noise forecast mature and settled): " + d.Reason
	}
	return d, nil
}

func (p *adaptive) observe(o Observation) (Decision, error) {
	t := p.t
	if o.Config != t.last.Config || t.reports == 0 {
		p.arrived = o.ElapsedS - o.Steps*o.StepTime
	}
	if err := t.observe(o); err != nil {
		return Decision{}, err
	}
	if !t.measured(o.Config) {
		return t.waitToMeasure(fmt.Sprintf("measuring %s", o.Config)), nil
	}
	if c, ok := t.nextColdStart(); ok {
		return p.probing(t.probe(c, fmt.Sprintf("adaptive: cold-start probe %s for the paper's statistical model", c))), nil
	}
	if err := p.refit(o); err != nil {
		return Decision{}, err
	}
	d, err := t.decide(p.models)
	if err != nil {
		return Decision{}, fmt.Errorf("adaptive policy: %w", err)
	}
	if opt, ok := t.nextProbe(d.Predictions); ok {
		p.probed++
		pd := t.probeOf(fmt.Sprintf("adaptive probe %d", p.probed), opt)
		pd.Predictions, pd.FittedTypes = d.Predictions, d.FittedTypes
		return p.probing(pd), nil
	}
	// Before the noise estimate is reliable and its forecast mature, moves
	// are provisional: later reports revisit them.
	return p.move(o, d), nil
}

// probing notes that d, a probe, leaves the configuration: a probe does not
// dwell (a live job stayed 41 s at a probe 3.4 times slower than where it
// came from, held by the dwell of the move before the probe).
func (p *adaptive) probing(d Decision) Decision {
	p.moved = false
	return d
}

// move turns the objective's choice d into a move, or a stay when the job
// is already there, moved too recently, or would not gain the margin.
func (p *adaptive) move(o Observation, d Decision) Decision {
	t := p.t
	cur := -1
	for i, pr := range d.Predictions {
		if pr.Candidate == o.Config {
			cur = i
		}
	}
	best := d.Predictions[d.Chosen]
	if d.Config == o.Config || cur < 0 {
		d.Reason = "stay: " + d.Reason
		return d
	}
	stay := func(reason string) Decision {
		s := t.stay(reason)
		s.Predictions, s.Chosen, s.FittedTypes, s.Provisional = d.Predictions, cur, d.FittedTypes, d.Provisional
		return s
	}
	need := dwellFactor * float64(int(1)<<p.reversals)
	if dwell := o.ElapsedS - p.arrived; dwell < need*t.relaunchS() && p.moved {
		why := fmt.Sprintf("stay: %.0f s in %s, less than %.0f relaunches' worth since the last move", dwell, o.Config, need)
		if p.reversals > 0 {
			why += fmt.Sprintf(" (%d moves went back to a configuration a move left)", p.reversals)
		}
		return stay(why)
	}
	if !t.worthMoving(d.Predictions[cur], best) {
		return stay(fmt.Sprintf("stay: %s does not beat %s by %.0f%% after the relaunch", best.Candidate, o.Config, 100*t.spec.Margin))
	}
	d.Reason = "move: " + d.Reason
	d.WaitSteps = t.spec.ProbeSteps
	if p.left[d.Config] && p.reversals < maxReversals {
		p.reversals++
	}
	if p.left == nil {
		p.left = map[predict.Candidate]bool{}
	}
	p.left[o.Config] = true
	// Only a move to a measured configuration must dwell: one to a
	// configuration never run is measured by the move, like a probe, and
	// may be left at once if it disappoints.
	p.moved = t.measured(d.Config)
	return d
}

// refit refits the models when a new configuration has been measured, and
// refreshes the measured overlay otherwise.
func (p *adaptive) refit(o Observation) error {
	t := p.t
	n := 0
	for c := range t.meas {
		if t.measured(c) {
			n++
		}
	}
	if p.models.models != nil && n == p.fitted {
		if m, ok := p.models.models[o.Config.Type].(measuredOver); ok {
			p.models.models[o.Config.Type] = t.overlay(o.Config.Type, m.base)
		}
		return nil
	}
	ms, err := t.fit()
	if err != nil {
		return fmt.Errorf("adaptive policy: %w", err)
	}
	p.models, p.fitted = ms, n
	return nil
}

// worthMoving applies the hysteresis: the candidate must beat staying by the
// margin in the objective's terms, relaunch included, at the pessimistic
// end of its interval (see tracker.choose); a candidate that meets a
// deadline or budget the current one breaks always wins.
func (t *tracker) worthMoving(cur, next predict.Prediction) bool {
	cur, next = cur.Pessimistic(), next.Pessimistic()
	o := t.spec.Objective
	m := t.spec.Margin
	if o.DeadlineS > 0 {
		left := o.DeadlineS - t.last.ElapsedS
		if cur.TotalS > left && next.TotalS <= left {
			return true
		}
	}
	if o.BudgetUSD > 0 {
		left := o.BudgetUSD - t.last.SpentUSD
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
