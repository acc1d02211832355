package policy

import (
	"fmt"
	"math"
	"sort"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/perf"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// probeOption is one configuration the search could measure next, valued
// in the objective's units (seconds, dollars, or for the knee seconds ×
// dollars).
type probeOption struct {
	c predict.Candidate
	// voi is the expected improvement over the incumbent of the best
	// candidate the probe informs (value of information × chance of
	// winning); pwin is that candidate's chance to beat the incumbent.
	voi, pwin float64
	// cost is what the probe costs beyond the progress it makes: its steps
	// against the incumbent's, and the relaunch back if it does not win.
	cost float64
	// design marks a probe of its type's identifiability design.
	design bool
	// idx indexes c's prediction.
	idx int
}

// net is what the probe is worth after its cost.
func (o probeOption) net() float64 { return o.voi - o.cost }

// objectiveValue is a prediction's measure under the objective, at its
// point and at both ends of its 90 % interval (knee: time × cost).
func (t *tracker) objectiveValue(p predict.Prediction) (pt, lo, hi float64) {
	switch t.spec.Objective.Kind {
	case objective.Time:
		return p.TotalS, p.TotalSLo, p.TotalSHi
	case objective.Cost:
		return p.TotalUSD, p.TotalUSDLo, p.TotalUSDHi
	default:
		return p.TotalS * p.TotalUSD, p.TotalSLo * p.TotalUSDLo, p.TotalSHi * p.TotalUSDHi
	}
}

// improvement is the expected improvement E[(v* − V)⁺] over the incumbent
// v* of a value V whose log has its median at ln pt and, on either side, a
// half-normal that puts lo and hi at the 5 % and 95 % quantiles (intervals
// are lopsided: a bound on one side, a guess on the other), and the chance
// P(V < v*) that V wins.
func improvement(vstar, pt, lo, hi float64) (ei, pwin float64) {
	if !(pt > 0) || !(vstar > 0) {
		return 0, 0
	}
	sl, sh := 0.0, 0.0
	if lo > 0 && lo < pt {
		sl = math.Log(pt/lo) / perf.Z90
	}
	if hi > pt && !math.IsInf(hi, 0) {
		sh = math.Log(hi/pt) / perf.Z90
	}
	x := math.Log(vstar / pt)
	// below(a) = ∫ over the lower half-normal up to ln pt + a (a ≤ 0) of
	// (v* − e^u) times its density; above likewise from ln pt up to + a.
	if x <= 0 {
		if sl == 0 {
			return 0, 0
		}
		d := x / sl
		return math.Max(vstar*normCDF(d)-pt*math.Exp(sl*sl/2)*normCDF(d-sl), 0), normCDF(d)
	}
	low := (vstar - pt) / 2
	if sl > 0 {
		low = vstar/2 - pt*math.Exp(sl*sl/2)*normCDF(-sl)
	}
	if sh == 0 {
		return low + (vstar-pt)/2, 1
	}
	d := x / sh
	up := vstar*(normCDF(d)-0.5) - pt*math.Exp(sh*sh/2)*(normCDF(d-sh)-normCDF(-sh))
	return math.Max(low+up, 0), normCDF(d)
}

func normCDF(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

// incumbent is the index of the best measured configuration's prediction
// (the current configuration's when none is measured), or -1.
func (t *tracker) incumbent(preds []predict.Prediction) int {
	best, cur := -1, -1
	bestV := math.Inf(1)
	for i, p := range preds {
		if p.Candidate == t.last.Config {
			cur = i
		}
		if !t.measured(p.Candidate) {
			continue
		}
		if v, _, _ := t.objectiveValue(p); v < bestV {
			best, bestV = i, v
		}
	}
	if best < 0 {
		return cur
	}
	return best
}

// probeCost is what probing p costs in the objective's units when p does
// not win (when it wins, its relaunch and steps are the move's, counted in
// its totals and so in the expected improvement): the relaunch into p
// (billed at all of p's nodes for cost), its steps against the same
// progress on the incumbent, the relaunch to leave it, and for the machines
// p must buy (those the incumbent does not hold), what their provider's
// minimum bill adds to the time the probe uses them.
func (t *tracker) probeCost(p, inc predict.Prediction, pwin float64) float64 {
	steps := t.spec.ProbeSteps
	r := t.relaunchS()
	incPerProgress := inc.StepTime / math.Max(inc.Gain, 1e-12)
	perS := func(c predict.Candidate) float64 { return float64(c.Nodes) * t.spec.Prices[c.Type] / 3600 }
	lossS := steps*p.StepTime - steps*p.Gain*incPerProgress
	lossUSD := steps*p.StepTime*perS(p.Candidate) - steps*p.Gain*incPerProgress*perS(inc.Candidate)
	lose := 1 - pwin
	costS := lose * (2*r + math.Max(lossS, 0))
	costUSD := lose * (r*perS(p.Candidate) + r*perS(inc.Candidate) + math.Max(lossUSD, 0) + t.minimumBill(p, inc, steps*p.StepTime+r))
	switch t.spec.Objective.Kind {
	case objective.Time:
		return costS
	case objective.Cost:
		return costUSD
	default: // first order in the product
		return inc.TotalS*costUSD + inc.TotalUSD*costS
	}
}

// minimumBill is what the machines probe p buys (its nodes that incumbent
// inc does not hold: all of them on another type) are billed beyond the
// used seconds of the probe, at their type's minimum bill.
func (t *tracker) minimumBill(p, inc predict.Prediction, used float64) float64 {
	bought := p.Nodes
	if p.Type == inc.Type {
		bought = max(p.Nodes-inc.Nodes, 0)
	}
	unused := math.Max(t.spec.MinimumBillS[p.Type]-used, 0)
	return float64(bought) * unused * t.spec.Prices[p.Type] / 3600
}

// regime is a placement class: one replica, several on one node, several
// nodes. A probe informs the candidates of its type and regime.
func regime(c predict.Candidate) int {
	switch {
	case c.Workers == 1:
		return 0
	case c.Nodes == 1:
		return 1
	}
	return 2
}

// designProbes is the identifiability design of typ: the fewest replicas at
// the smallest batch, a full single node (the most replicas one node of
// typ holds) at its smallest and largest batch, and the most replicas at
// the largest batch — one replica, one-node sync and multi-node sync, each
// at both ends of the local batch. Without the full node, single-node
// configurations would be predicted from multi-node sync alone.
func designProbes(cands []predict.Candidate, typ string) []predict.Candidate {
	var of []predict.Candidate
	for _, c := range cands {
		if c.Type == typ {
			of = append(of, c)
		}
	}
	if len(of) == 0 {
		return nil
	}
	sort.Slice(of, func(i, j int) bool {
		if of[i].Workers != of[j].Workers {
			return of[i].Workers < of[j].Workers
		}
		return of[i].Batch < of[j].Batch
	})
	kmin, kmax, full := of[0].Workers, of[len(of)-1].Workers, 0
	for _, c := range of {
		if c.Nodes == 1 {
			full = max(full, c.Workers)
		}
	}
	var out []predict.Candidate
	add := func(k int, largest bool) {
		var got *predict.Candidate
		for i := range of {
			if of[i].Workers == k && (got == nil || largest) {
				got = &of[i]
			}
		}
		if got != nil && !contains(out, *got) {
			out = append(out, *got)
		}
	}
	add(kmin, false)
	add(full, false)
	add(full, true)
	add(kmax, true)
	return out
}

// design is designProbes of typ, computed once.
func (t *tracker) design(typ string) []predict.Candidate {
	if t.designs == nil {
		t.designs = map[string][]predict.Candidate{}
		for _, ty := range t.types {
			t.designs[ty] = designProbes(t.spec.Candidates, ty)
		}
	}
	return t.designs[typ]
}

// nextProbe values every probe the search could make and returns the one
// worth most beyond its cost, if any is worth anything. A probe informs the
// candidates of its type and placement regime, so its value is the best
// expected improvement among them (a type never measured is thereby probed
// only if its optimistic prediction can beat the incumbent by more than the
// probe costs). Each regime offers two probes: its identifiability design
// point (see designProbes) and its most promising candidate itself; each
// is charged its own cost, and on a tie the design point goes first.
func (t *tracker) nextProbe(preds []predict.Prediction) (probeOption, bool) {
	inc := t.incumbent(preds)
	if inc < 0 {
		return probeOption{}, false
	}
	// The incumbent is what the job would do without probing: the best
	// measured configuration, or any other at its pessimistic value (see
	// tracker.choose).
	vstar, _, _ := t.objectiveValue(preds[inc])
	for _, p := range preds {
		if v, _, _ := t.objectiveValue(p.Pessimistic()); t.feasible(p) && v < vstar {
			vstar = v
		}
	}
	type group struct {
		typ string
		reg int
	}
	best := map[group]probeOption{}
	byCand := map[predict.Candidate]int{} // the design probes' predictions
	for _, typ := range t.types {
		for _, d := range t.design(typ) {
			byCand[d] = -1
		}
	}
	for i, p := range preds {
		if _, ok := byCand[p.Candidate]; ok {
			byCand[p.Candidate] = i
		}
		if t.measured(p.Candidate) || !t.feasible(p) {
			continue
		}
		pt, lo, hi := t.objectiveValue(p)
		if lo >= vstar {
			continue // its interval cannot beat the incumbent
		}
		ei, pwin := improvement(vstar, pt, lo, hi)
		g := group{p.Type, regime(p.Candidate)}
		if ei > best[g].voi {
			best[g] = probeOption{c: p.Candidate, voi: ei, pwin: pwin, idx: i}
		}
	}
	mature := t.forecastMature()
	var opts []probeOption
	for _, typ := range t.types {
		// Of a regime's design probes, the one nearest (in local batch) the
		// regime's most promising candidate — or, while the noise forecast
		// is immature, the one at the largest batch: the noise scale grows
		// over training, so the batch worth running only grows, and an
		// immature forecast understates that.
		near := map[int]predict.Candidate{}
		for _, d := range t.design(typ) {
			g, seen := best[group{typ, regime(d)}]
			if !seen || t.measured(d) || d == t.last.Config || byCand[d] < 0 {
				continue
			}
			o, ok := near[regime(d)]
			switch {
			case !ok, mature && logDist(d, g.c) < logDist(o, g.c), !mature && d.Batch > o.Batch:
				near[regime(d)] = d
			}
		}
		for reg := 0; reg < 3; reg++ {
			g, seen := best[group{typ, reg}]
			if !seen {
				continue
			}
			if d, ok := near[reg]; ok {
				// The design point informs the regime's best candidate,
				// but the job stays there only if the point itself wins:
				// it is charged its own chance of leaving again.
				dp := preds[byCand[d]]
				pt, lo, hi := t.objectiveValue(dp)
				_, dwin := improvement(vstar, pt, lo, hi)
				opts = append(opts, probeOption{c: d, voi: g.voi, pwin: g.pwin, cost: t.probeCost(dp, preds[inc], dwin), design: true})
			}
			g.cost = t.probeCost(preds[g.idx], preds[inc], g.pwin)
			opts = append(opts, g)
		}
	}
	return bestOption(opts)
}

// logDist is how far apart two candidates' local batches are, in log terms.
func logDist(a, b predict.Candidate) float64 { return math.Abs(math.Log(a.Local() / b.Local())) }

// bestOption is the option of largest positive net value (ties: the first).
func bestOption(opts []probeOption) (probeOption, bool) {
	var got probeOption
	found := false
	for _, o := range opts {
		if o.net() > 0 && (!found || o.net() > got.net()) {
			got, found = o, true
		}
	}
	return got, found
}

// feasible reports whether a prediction's optimistic end meets what is
// left of the deadline and budget.
func (t *tracker) feasible(p predict.Prediction) bool {
	o := t.spec.Objective
	if o.DeadlineS > 0 && p.TotalSLo > o.DeadlineS-t.last.ElapsedS {
		return false
	}
	if o.BudgetUSD > 0 && p.TotalUSDLo > o.BudgetUSD-t.last.SpentUSD {
		return false
	}
	return true
}

// probeOf moves to o's configuration to measure it, saying why in the
// reason and in numbers (Decision.Probe).
func (t *tracker) probeOf(who string, o probeOption) Decision {
	d := t.probe(o.c, t.probeReason(who, o))
	d.Probe = &ProbeValue{Gain: o.voi, Cost: o.cost, Chance: o.pwin, Units: t.units(), Design: o.design}
	return d
}

// probeReason says why a probe is made, in words.
func (t *tracker) probeReason(who string, o probeOption) string {
	kind := "candidate"
	if o.design {
		kind = "identifiability probe"
	}
	return fmt.Sprintf("%s: %s %s (expected improvement %.4g, chance %.0f%%, cost %.4g in %s)", who, kind, o.c, o.voi, 100*o.pwin, o.cost, t.units())
}

// units names the objective's units.
func (t *tracker) units() string {
	switch t.spec.Objective.Kind {
	case objective.Time:
		return "s"
	case objective.Cost:
		return "$"
	}
	return "s·$"
}
