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
	// adaptiveWarmReports is the number of reports before the first
	// decision; the estimate keeps being refined afterwards.
	adaptiveWarmReports = 3
	// payoffFactor: no search when the job will finish within this many
	// relaunches in its current configuration.
	payoffFactor = 20.0
	// probeBudget: the relaunches of probes may cost at most this fraction
	// of the best predicted remaining time.
	probeBudget = 0.02
	// adaptiveDecay is the EMA factor per M0-sized batch of the noise
	// estimate.
	adaptiveDecay = 0.99
	// competitive: later probe rounds skip a type whose best measured
	// configuration scores worse than this multiple of the best.
	competitive = 1.1
	// dwellFactor: after a move, stay at least this many relaunches' worth
	// of time before the next move, so that noisy telemetry cannot make the
	// job oscillate.
	dwellFactor = 10.0
	// commitReports and commitTol: the plan is committed once the noise
	// forecast is mature and the whole-job prediction of the chosen
	// configuration has stayed within commitTol over commitReports reports.
	commitReports = 5
	commitTol     = 0.02
	// kneeBudget: for the knee, the first type's second shape (a front
	// needs two points) is probed while one relaunch stays within this
	// fraction of the remaining-time estimate.
	kneeBudget = 0.1
	// probesPerType bounds the planned probes of one machine type.
	probesPerType = 2
)

// adaptive probes a few configurations, chosen by a prior on the objective
// and only while their relaunches fit a budget relative to the best
// predicted remaining time; then it re-optimises at every report with a
// forecast of the noise scale's growth, moving only when the gain beats the
// relaunch by the margin.
type adaptive struct {
	t        *tracker
	planned  bool
	noSearch bool
	probes   []predict.Candidate
	probed   int
	// arrived is when the job entered its current configuration; moved
	// says whether a model-based move has happened (moves, unlike probes,
	// must dwell).
	arrived float64
	moved   bool
	// optimistic bounds the remaining time from below at the first
	// decision, assuming speed proportional to price.
	optimistic float64
	models     map[string]predict.StepTimer
	fitted     int // measured configurations behind models
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
// noise forecast is mature (its progress has quadrupled) and its whole-job
// prediction has settled (see commitReports) is marked Commit: it
// re-predicts the job with the forecast the early decisions lacked, and its
// predictions are the plan's. A later move replaces the plan, which is
// committed again once its prediction settles.
func (p *adaptive) Observe(o Observation) (Decision, error) {
	return p.t.label(p.commit(o))
}

// commit is Observe without the throughput-only label: it marks the
// decision that commits the plan. A throughput-only job has no noise
// forecast to wait for; its plan is committed once its prediction settles.
func (p *adaptive) commit(o Observation) (Decision, error) {
	d, err := p.observe(o)
	if err != nil || !p.planned || p.noSearch {
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
	if !settled(p.jcts, commitReports, commitTol) {
		return d, nil
	}
	switch {
	case p.t.throughputOnly():
		d.Commit, p.committed = true, true
		d.Reason = "commit (prediction settled): " + d.Reason
	case p.t.forecastMature():
		d.Commit, p.committed = true, true
		d.Reason = "commit (noise forecast mature and settled): " + d.Reason
	}
	return d, nil
}

func (p *adaptive) observe(o Observation) (Decision, error) {
	t := p.t
	t.forecast, t.transfer = true, true
	if o.Config != t.last.Config || t.reports == 0 {
		p.arrived = o.ElapsedS - o.Steps*o.StepTime
	}
	if err := t.observe(o); err != nil {
		return Decision{}, err
	}
	if t.reports < adaptiveWarmReports && !t.throughputOnly() {
		d := t.warmingUp("waiting for a first noise estimate")
		d.WaitSteps = t.spec.ProbeSteps
		return d, nil
	}
	if p.noSearch {
		return t.stay("search does not pay; staying"), nil
	}
	if !t.measured(o.Config) {
		return t.waitToMeasure(fmt.Sprintf("measuring %s", o.Config)), nil
	}
	if !p.planned {
		p.planned = true
		m := t.meas[o.Config]
		gain := t.gain(float64(o.Config.Batch) / t.spec.M0)
		remS := math.Max(t.spec.Target-o.Progress, 0) / gain * m.step
		if remS < payoffFactor*t.spec.RelaunchS {
			p.noSearch = true
			return t.stay(fmt.Sprintf("search does not pay: %.0f s left here, relaunch %.0f s", remS, t.spec.RelaunchS)), nil
		}
		p.probes, _ = priorProbes(t.spec, o.Config)
		p.optimistic = remS * t.spec.Prices[o.Config.Type] * float64(o.Config.Nodes) / maxHourly(t.spec)
	}
	if err := p.refit(o); err != nil {
		return Decision{}, err
	}
	d, err := t.decide(p.models)
	if err != nil {
		return Decision{}, fmt.Errorf("adaptive policy: %w", err)
	}
	best := d.Predictions[d.Chosen]
	if pd, ok := p.nextProbe(o, d.Predictions, best); ok {
		return pd, nil
	}
	cur := -1
	for i, pr := range d.Predictions {
		if pr.Candidate == o.Config {
			cur = i
		}
	}
	if d.Config == o.Config || cur < 0 {
		d.Reason = "stay: " + d.Reason
		return d, nil
	}
	if dwell := o.ElapsedS - p.arrived; dwell < dwellFactor*t.spec.RelaunchS && p.moved {
		stay := t.stay(fmt.Sprintf("stay: %.0f s in %s, less than %.0f relaunches' worth since the last move", dwell, o.Config, dwellFactor))
		stay.Predictions, stay.Chosen = d.Predictions, cur
		return stay, nil
	}
	if !p.worthMoving(d.Predictions[cur], best) {
		stay := t.stay(fmt.Sprintf("stay: %s does not beat %s by %.0f%% after the relaunch", best.Candidate, o.Config, 100*t.spec.Margin))
		stay.Predictions, stay.Chosen = d.Predictions, cur
		return stay, nil
	}
	d.Reason = "move: " + d.Reason
	d.WaitSteps = t.spec.ProbeSteps
	p.moved = true
	return d, nil
}

// maxHourly is the highest $/hour of any candidate (nodes × price).
func maxHourly(spec Spec) float64 {
	m := 0.0
	for _, c := range spec.Candidates {
		m = math.Max(m, float64(c.Nodes)*spec.Prices[c.Type])
	}
	return m
}

// score is the objective's measure of a prediction (knee: time × cost).
func (p *adaptive) score(pr predict.Prediction) float64 {
	switch p.t.spec.Objective.Kind {
	case objective.Time:
		return pr.RemainingS
	case objective.Cost:
		return pr.RemainingUSD
	default:
		return pr.RemainingS * pr.RemainingUSD
	}
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
	if p.models != nil && n == p.fitted {
		if m, ok := p.models[o.Config.Type].(measuredOver); ok {
			p.models[o.Config.Type] = t.overlay(o.Config.Type, m.base)
		}
		return nil
	}
	models, _, err := t.fit()
	if err != nil {
		return fmt.Errorf("adaptive policy: %w", err)
	}
	p.models, p.fitted = models, n
	return nil
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

// priorProbes orders probes by a prior on the objective that uses only the
// catalog: for least time (and the knee), the most expensive machine types
// first (price tracks speed), each at its largest configuration and largest
// batch (for the knee, that type's full node at its largest batch comes
// second); for least cost or under a budget, the cheapest types per GPU first,
// each as one full node. Further rounds add the other shape of each type and
// a small batch, so that every type can be fitted.
func priorProbes(spec Spec, current predict.Candidate) ([]predict.Candidate, int) {
	byType := map[string][]predict.Candidate{}
	var types []string
	for _, c := range spec.Candidates {
		if byType[c.Type] == nil {
			types = append(types, c.Type)
		}
		byType[c.Type] = append(byType[c.Type], c)
	}
	perGPU := map[string]float64{}
	for typ, cs := range byType {
		g := 0
		for _, c := range cs {
			if c.Nodes == 1 {
				g = max(g, c.Workers)
			}
		}
		perGPU[typ] = spec.Prices[typ] / float64(max(g, 1))
	}
	// Least cost, and least time under a budget, start from cheap types.
	cost := spec.Objective.Kind == objective.Cost || spec.Objective.BudgetUSD > 0
	sort.SliceStable(types, func(i, j int) bool {
		if cost {
			return perGPU[types[i]] < perGPU[types[j]]
		}
		return spec.Prices[types[i]] > spec.Prices[types[j]]
	})
	per := map[string][]predict.Candidate{}
	for _, typ := range types {
		of := byType[typ]
		sort.Slice(of, func(i, j int) bool {
			if of[i].Workers != of[j].Workers {
				return of[i].Workers < of[j].Workers
			}
			return of[i].Batch < of[j].Batch
		})
		maxK, fullNode := of[len(of)-1].Workers, 0
		for _, c := range of {
			if c.Nodes == 1 {
				fullNode = max(fullNode, c.Workers)
			}
		}
		// of is sorted by K then B: the first match has the smallest B.
		pick := func(k int, largestB bool) *predict.Candidate {
			var got *predict.Candidate
			for i := range of {
				if of[i].Workers == k && (got == nil || largestB) {
					got = &of[i]
				}
			}
			return got
		}
		order := []*predict.Candidate{pick(maxK, true), pick(fullNode, true), pick(fullNode, false)}
		if cost {
			order = []*predict.Candidate{pick(fullNode, true), pick(maxK, true), pick(fullNode, false)}
		}
		for _, c := range order {
			if c != nil && !contains(per[typ], *c) && len(per[typ]) < probesPerType {
				per[typ] = append(per[typ], *c)
			}
		}
	}
	var out []predict.Candidate
	first := 0
	for round := 0; round < probesPerType; round++ {
		for _, typ := range types {
			if round < len(per[typ]) && per[typ][round] != current {
				out = append(out, per[typ][round])
			}
		}
		if round == 0 {
			first = len(out)
		}
	}
	// The knee needs a front: the first type's second shape comes second.
	if spec.Objective.Kind == objective.Knee && len(types) > 0 && len(per[types[0]]) > 1 {
		second := per[types[0]][1]
		for i := 1; i < len(out); i++ {
			if out[i] == second {
				copy(out[2:i+1], out[1:i])
				out[1] = second
				break
			}
		}
	}
	return out, first
}

// nextProbe is the next configuration to probe, if one is worth it, given
// the predictions of every candidate and the best of them.
func (p *adaptive) nextProbe(o Observation, preds []predict.Prediction, best predict.Prediction) (Decision, bool) {
	t := p.t
	// Probes are budgeted: the first (the prior's favourite) always runs;
	// each further one only while all their relaunches stay within
	// probeBudget of an estimate of the remaining time — the smaller of the
	// best measured configuration's prediction and an optimistic bound
	// (speed proportional to price) — and only for types whose best measured
	// configuration is competitive.
	bestMeasured := math.Inf(1)
	bestScore, typeScore := math.Inf(1), map[string]float64{}
	for _, pr := range preds {
		if !t.measured(pr.Candidate) {
			continue
		}
		bestMeasured = math.Min(bestMeasured, pr.RemainingS)
		sc := p.score(pr)
		bestScore = math.Min(bestScore, sc)
		if v, ok := typeScore[pr.Type]; !ok || sc < v {
			typeScore[pr.Type] = sc
		}
	}
	horizon := math.Min(bestMeasured, p.optimistic)
	for _, c := range p.probes {
		if t.measured(c) || c == o.Config {
			continue
		}
		// The knee needs a front, so the first type's second shape gets a
		// larger budget (kneeBudget instead of probeBudget).
		kneeSecond := t.spec.Objective.Kind == objective.Knee && p.probed == 1 && len(p.probes) > 1 && c == p.probes[1] &&
			p.probes[0].Type == c.Type && t.spec.RelaunchS <= kneeBudget*horizon
		if p.probed > 0 && !kneeSecond {
			if float64(p.probed)*t.spec.RelaunchS > probeBudget*horizon {
				break
			}
			if v, ok := typeScore[c.Type]; ok && v > competitive*bestScore {
				continue
			}
		}
		p.probed++
		pd := t.probe(c, fmt.Sprintf("adaptive probe %d (best so far %s)", p.probed, best.Candidate))
		pd.Predictions = preds
		return pd, true
	}
	return Decision{}, false
}
