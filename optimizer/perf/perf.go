// Package perf models the time of one data-parallel optimizer step on one
// machine type as a function of nodes N, replicas K and per-replica batch m.
//
// Two forms are fitted with gonum. Scavenger's (Tyagi & Sharma, CCGrid 2023,
// Eqs. 8–10) is step = (α_c + β_c·m) + (α_s + β_s·K), fitted by ordinary least
// squares on compute and sync times separately; it needs only two probes.
// Pollux's (Qiao et al., OSDI 2021; AdaptDL goodput.py) is
// step = (T_grad^γ + T_sync^γ)^(1/γ) with T_grad = α_c + β_c·m and T_sync
// distinguishing one replica, several replicas on one node, and several
// nodes; it is fitted by minimising RMSLE with gonum/optimize.
//
// Fit never estimates more than the points identify (Guard): a parameter is
// free only if the points vary what it describes, and there are no more free
// parameters than measurements; the rest are fixed to the simpler form
// (compute ∝ √m with one local batch, no overlap, flat sync, AdaptDL's
// tie between regimes). With three configurations or more it keeps the form
// that predicts held-out configurations better, and that cross-validated
// error (Fitted.CV) scales its 90 % prediction intervals (Fitted.Interval)
// where the measurements identify the model; elsewhere the intervals run
// to the physical bounds the measurements imply (Bounds: a step never
// beats its own compute; at fixed placement a larger local batch takes no
// less time per step and no more per sample).
package perf

import (
	"fmt"
	"math"
	"sort"
)

// Point is one measured configuration: the mean step and sync time at
// (Nodes, Replicas, LocalBatch).
type Point struct {
	Nodes      int
	Replicas   int
	LocalBatch float64
	StepTime   float64
	SyncTime   float64
}

// Validate checks that p can be used in a fit.
func (p Point) Validate() error {
	switch {
	case p.Nodes < 1 || p.Replicas < p.Nodes:
		return fmt.Errorf("%w: %d replicas on %d nodes", ErrBadPoint, p.Replicas, p.Nodes)
	case !(p.LocalBatch > 0) || math.IsInf(p.LocalBatch, 0):
		return fmt.Errorf("%w: local batch %g", ErrBadPoint, p.LocalBatch)
	case !(p.StepTime > 0) || math.IsInf(p.StepTime, 0):
		return fmt.Errorf("%w: step time %g", ErrBadPoint, p.StepTime)
	case !(p.SyncTime >= 0) || p.SyncTime > p.StepTime:
		return fmt.Errorf("%w: sync time %g with step time %g", ErrBadPoint, p.SyncTime, p.StepTime)
	}
	return nil
}

// Form names a model form.
type Form string

// The model forms.
const (
	FormScavenger Form = "scavenger"
	FormPollux    Form = "pollux"
)

// Model predicts step time. Implementations are immutable values.
type Model interface {
	// StepTime returns the predicted seconds of one step.
	StepTime(nodes, replicas int, local float64) float64
	// Form names the model form.
	Form() Form
}

// Fitted is a model together with how sure it is.
type Fitted struct {
	Model
	// Points is the number of measurements the fit used.
	Points int
	// Configs is the number of distinct (nodes, replicas, local batch).
	Configs int
	// Params is the number of parameters the fit estimated (see Guard).
	Params int
	// RMSLE is the in-sample root mean squared log error of step time
	// (≈ relative error).
	RMSLE float64
	// CV is the leave-one-configuration-out root mean squared log error of
	// step time: each distinct configuration predicted by the same form
	// fitted without it. It is NaN with fewer than three configurations
	// (nothing left to validate against).
	CV float64
	// Notes say, in words, how the fit was constrained (see Guard) and
	// which form cross-validation chose.
	Notes []string
	// Range is the region the measurements cover.
	Range Range
	// Bounds are what the measurements imply without any model.
	Bounds Bounds
}

// Range is the region of configurations covered by measurements.
type Range struct {
	MinLocal, MaxLocal float64
	MaxReplicas        int
	MaxNodes           int
	SingleNodeMulti    bool // some point has several replicas on one node
	MultiNode          bool // some point spans several nodes
	// SingleK and MultiK are the least and most replicas measured on one
	// node (with several replicas) and on several nodes.
	SingleK, MultiK [2]int
}

// Inside reports whether (nodes, replicas, local) lies in the measured
// region: local batch within the measured range and, for several replicas,
// a replica count within those measured in the same regime (several on one
// node, or several nodes). A regime measured at one replica count covers
// that count only: the slope in K is then an assumption, not a fit.
func (r Range) Inside(nodes, replicas int, local float64) bool {
	if local < r.MinLocal*(1-1e-9) || local > r.MaxLocal*(1+1e-9) {
		return false
	}
	switch {
	case replicas == 1:
		return true
	case nodes == 1:
		return r.SingleNodeMulti && replicas >= r.SingleK[0] && replicas <= r.SingleK[1]
	default:
		return r.MultiNode && replicas >= r.MultiK[0] && replicas <= r.MultiK[1]
	}
}

// Confidence says how far a prediction at (nodes, replicas, local) can be
// trusted: "measured-range" when the query is inside the measured region and
// the in-sample error is below 5 %, "extrapolated" when outside it, and
// "poor-fit" when the in-sample error is 5 % or more.
func (f *Fitted) Confidence(nodes, replicas int, local float64) string {
	if f.RMSLE >= 0.05 {
		return "poor-fit"
	}
	if f.Range.Inside(nodes, replicas, local) {
		return "measured-range"
	}
	return "extrapolated"
}

// Z90 is the standard normal quantile of a two-sided 90 % interval.
const Z90 = 1.6448536269514722

// Interval is the 90 % prediction interval of the step time at (nodes,
// replicas, local), with the point prediction inside it (see Around).
func (f *Fitted) Interval(nodes, replicas int, local float64) (lo, pt, hi float64) {
	return f.Around(nodes, replicas, local, f.StepTime(nodes, replicas, local))
}

// Around is the 90 % interval of the step time at (nodes, replicas, local)
// around a point prediction pt (this fit's, or another model's for the same
// machine type), with pt cut to the Bounds. Where the measurements identify
// the model (the query inside the measured Range, and a cross-validated
// error to scale by) it is pt times exp(±Z90·CV), cut to the Bounds.
// Elsewhere nothing validates the model, so the interval runs from the
// physical lower bound (perfect scaling of the measured compute) to as far
// above the point in log terms, and at least twice the point (within the
// bounds): a point near the lower bound (a fit that extrapolates a compute
// time flat in the local batch, or one that falls with it, cut to the
// bound) would otherwise leave no room above it, as if measured. For
// several replicas in a placement regime
// never measured (several on one node, or several nodes) the scaling
// efficiency e = T_perfect/T is unknown between no scaling (1/K: the
// workers taking turns) and perfect scaling (1): taking it uniform there,
// the point is its median, 2K/(K+1) times perfect scaling (not the
// model's, which ties the regime to the other one by AdaptDL's factor —
// a guess that, on a slow network, is wrong by several times), and the
// interval reaches up to its 5 % quantile.
func (f *Fitted) Around(nodes, replicas int, local, pt float64) (lo, mid, hi float64) {
	plo, phi := f.Bounds.At(nodes, replicas, local)
	if plo > phi { // inconsistent (noisy) measurements: keep them both
		plo, phi = phi, plo
	}
	pt = math.Min(math.Max(pt, plo), phi)
	if !(pt > 0) || math.IsInf(pt, 0) {
		return pt, pt, pt
	}
	if f.Range.Inside(nodes, replicas, local) && !math.IsNaN(f.CV) {
		w := math.Exp(Z90 * f.CV)
		return math.Max(pt/w, plo), pt, math.Min(pt*w, phi)
	}
	lo = math.Min(plo, pt)
	if !(lo > 0) {
		lo = pt / 2 // nothing bounds it: at least a factor of two
	}
	hi = math.Max(pt*pt/lo, 2*pt)
	measured := replicas == 1 || (nodes == 1 && f.Range.SingleNodeMulti) || (nodes > 1 && f.Range.MultiNode)
	if !measured {
		k := float64(replicas)
		pt = math.Min(lo*2*k/(k+1), phi)
		e05 := 1/k + 0.05*(1-1/k)
		hi = math.Max(lo/e05, hi)
	}
	return lo, pt, math.Min(hi, math.Max(phi, pt))
}

// Fit validates points and fits the model the points identify: Pollux's
// form with only the parameters Guard allows (with one configuration that
// is compute ∝ √(local batch) and, for several replicas, one sync level: a
// prior more than a fit, which its intervals say), and — with three or
// more configurations over two local batches or more — Scavenger's linear
// form too, keeping whichever predicts the configurations it was not fitted
// on better (leave-one-configuration-out, the CV of the result).
func Fit(points []Point) (*Fitted, error) {
	if err := validate(points); err != nil {
		return nil, err
	}
	s := summarise(points)
	free, notes := Guard(points)
	p, err := fitPollux(points, free)
	if err != nil {
		return nil, err
	}
	f := finish(p, points, free.Count())
	f.Notes = notes
	if s.configs < 3 {
		return f, nil
	}
	f.CV = crossValidate(points, fitGuardedPollux)
	if s.locals < 2 {
		// The linear form would take compute ∝ local batch, which no
		// held-out configuration at the same local batch can check.
		return f, nil
	}
	lin, err := FitScavenger(points)
	if err != nil {
		return nil, err
	}
	if cv := crossValidate(points, fitLinear); cv < f.CV {
		g := finish(lin, points, lin.params(points))
		g.CV, g.Notes = cv, append(linearNotes(points), fmt.Sprintf("linear form cross-validates better (%.1f %% against %.1f %%)", 100*cv, 100*f.CV))
		return g, nil
	}
	return f, nil
}

func fitGuardedPollux(points []Point) (Model, error) {
	free, _ := Guard(points)
	return fitPollux(points, free)
}

func fitLinear(points []Point) (Model, error) { return FitScavenger(points) }

// crossValidate is the root mean squared log error of step time of each
// distinct configuration predicted by fit on the others (NaN with fewer
// than three configurations).
func crossValidate(points []Point, fit func([]Point) (Model, error)) float64 {
	type key struct {
		n, k int
		m    float64
	}
	by := map[key][]Point{}
	var keys []key
	for _, p := range points {
		k := key{p.Nodes, p.Replicas, p.LocalBatch}
		if by[k] == nil {
			keys = append(keys, k)
		}
		by[k] = append(by[k], p)
	}
	if len(keys) < 3 {
		return math.NaN()
	}
	var sum float64
	var n int
	for _, k := range keys {
		var rest []Point
		for _, p := range points {
			if (key{p.Nodes, p.Replicas, p.LocalBatch}) != k {
				rest = append(rest, p)
			}
		}
		m, err := fit(rest)
		if err != nil {
			continue
		}
		var mean float64
		for _, p := range by[k] {
			mean += p.StepTime / float64(len(by[k]))
		}
		pred := m.StepTime(k.n, k.k, k.m)
		if !(pred > 0) || math.IsInf(pred, 0) {
			return math.Inf(1)
		}
		d := math.Log(pred / mean)
		sum += d * d
		n++
	}
	if n == 0 {
		return math.NaN()
	}
	return math.Sqrt(sum / float64(n))
}

func finish(m Model, points []Point, params int) *Fitted {
	s := summarise(points)
	var sum float64
	for _, p := range points {
		d := math.Log(m.StepTime(p.Nodes, p.Replicas, p.LocalBatch)) - math.Log(p.StepTime)
		sum += d * d
	}
	return &Fitted{Model: m, Points: len(points), Configs: s.configs, Params: params, CV: math.NaN(),
		RMSLE: math.Sqrt(sum / float64(len(points))), Range: s.rng, Bounds: NewBounds(points)}
}

// widen extends the range [lo, hi] (empty unless seen) to k.
func widen(r [2]int, seen bool, k int) [2]int {
	if !seen {
		return [2]int{k, k}
	}
	return [2]int{min(r[0], k), max(r[1], k)}
}

func validate(points []Point) error {
	if len(points) == 0 {
		return fmt.Errorf("fit step time: %w", ErrNoPoints)
	}
	for i, p := range points {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("fit step time: point %d: %w", i, err)
		}
	}
	return nil
}

type summary struct {
	configs, locals, replicaCounts int
	// multiReplica counts the distinct configurations with several
	// replicas; singleXs and multiXs the distinct max(K−2, 0) among them on
	// one node and on several.
	multiReplica, singleXs, multiXs int
	rng                             Range
}

func summarise(points []Point) summary {
	type key struct {
		n, k int
		m    float64
	}
	cfg := map[key]bool{}
	ms := map[float64]bool{}
	ks := map[int]bool{}
	single, multi := map[int]bool{}, map[int]bool{}
	multiCfg := 0
	r := Range{MinLocal: math.Inf(1)}
	for _, p := range points {
		k := key{p.Nodes, p.Replicas, p.LocalBatch}
		if !cfg[k] && p.Replicas > 1 {
			multiCfg++
		}
		cfg[k] = true
		ms[p.LocalBatch] = true
		ks[p.Replicas] = true
		if p.Replicas > 1 {
			x := max(p.Replicas-2, 0)
			if p.Nodes == 1 {
				single[x] = true
			} else {
				multi[x] = true
			}
		}
		r.MinLocal = math.Min(r.MinLocal, p.LocalBatch)
		r.MaxLocal = math.Max(r.MaxLocal, p.LocalBatch)
		r.MaxReplicas = max(r.MaxReplicas, p.Replicas)
		r.MaxNodes = max(r.MaxNodes, p.Nodes)
		switch {
		case p.Nodes == 1 && p.Replicas > 1:
			r.SingleK = widen(r.SingleK, r.SingleNodeMulti, p.Replicas)
			r.SingleNodeMulti = true
		case p.Nodes > 1:
			r.MultiK = widen(r.MultiK, r.MultiNode, p.Replicas)
			r.MultiNode = true
		}
	}
	return summary{configs: len(cfg), locals: len(ms), replicaCounts: len(ks), multiReplica: multiCfg,
		singleXs: len(single), multiXs: len(multi), rng: r}
}

// FormMeasured names the one-configuration model.
const FormMeasured Form = "measured"

// Measured is the model of a type measured at a single configuration: it
// predicts that configuration's mean step time and declines (returns +Inf
// for) every other one, since one point identifies no trend.
type Measured struct {
	Nodes, Replicas int
	LocalBatch      float64
	Step            float64
}

// Form implements Model.
func (Measured) Form() Form { return FormMeasured }

// StepTime implements Model.
func (m Measured) StepTime(nodes, replicas int, local float64) float64 {
	if nodes == m.Nodes && replicas == m.Replicas && math.Abs(local-m.LocalBatch) <= 1e-9*m.LocalBatch {
		return m.Step
	}
	return math.Inf(1)
}

// Scavenger is the paper's linear form: compute α_c + β_c·m plus sync
// α_s + β_s·K (zero sync for one replica is not assumed).
type Scavenger struct {
	AlphaC, BetaC float64
	AlphaS, BetaS float64
}

// Form implements Model.
func (Scavenger) Form() Form { return FormScavenger }

// StepTime implements Model. It never returns less than 1 % of the compute
// intercept so that extrapolation cannot go negative.
func (s Scavenger) StepTime(_, replicas int, local float64) float64 {
	c := math.Max(s.AlphaC+s.BetaC*local, 1e-6)
	sy := math.Max(s.AlphaS+s.BetaS*float64(replicas), 0)
	return c + sy
}

// FitScavenger fits the Scavenger form by least squares: compute time
// (step − sync) against local batch, sync time against replicas. With one
// distinct local batch the data cannot tell an intercept from a slope, so
// compute is taken proportional to the local batch (the paper's Eq. 9: α_c =
// 0); with one distinct replica count sync is flat (β_s = 0).
func FitScavenger(points []Point) (Scavenger, error) {
	if err := validate(points); err != nil {
		return Scavenger{}, err
	}
	xs, cs, ks, ss := make([]float64, len(points)), make([]float64, len(points)), make([]float64, len(points)), make([]float64, len(points))
	for i, p := range points {
		xs[i], cs[i] = p.LocalBatch, p.StepTime-p.SyncTime
		ks[i], ss[i] = float64(p.Replicas), p.SyncTime
	}
	var ac, bc float64
	if distinct(xs) < 2 {
		for i := range xs {
			bc += cs[i] / xs[i] / float64(len(xs))
		}
	} else {
		ac, bc = line(xs, cs)
	}
	as, bs := line(ks, ss)
	return Scavenger{AlphaC: ac, BetaC: bc, AlphaS: as, BetaS: bs}, nil
}

// params is the number of parameters FitScavenger estimates on points.
func (Scavenger) params(points []Point) int {
	xs, ks := make([]float64, len(points)), make([]float64, len(points))
	for i, p := range points {
		xs[i], ks[i] = p.LocalBatch, float64(p.Replicas)
	}
	return min(distinct(xs), 2) + min(distinct(ks), 2)
}

// linearNotes says how FitScavenger constrains a fit on points.
func linearNotes(points []Point) []string {
	s := summarise(points)
	var notes []string
	if s.locals < 2 {
		notes = append(notes, "compute ∝ local batch (one local batch measured)")
	}
	if s.replicaCounts < 2 {
		notes = append(notes, "sync flat in K (one replica count measured)")
	}
	return notes
}

// Line fits y = a + b·x by ordinary least squares (gonum
// stat.LinearRegression); with fewer than two distinct x it returns the mean
// of y and slope 0.
func Line(x, y []float64) (a, b float64) { return line(x, y) }

// Transferred is a reference model's shape scaled to another machine type:
// StepTime = Factor · Ref.StepTime. It stands in for a type measured at too
// few configurations to fit on its own.
type Transferred struct {
	Ref    Model
	Factor float64
}

// Form implements Model.
func (t Transferred) Form() Form { return t.Ref.Form() + "-transferred" }

// StepTime implements Model.
func (t Transferred) StepTime(nodes, replicas int, local float64) float64 {
	return t.Factor * t.Ref.StepTime(nodes, replicas, local)
}

// Scaled returns ref scaled by the geometric mean ratio of measured to
// reference step times over points (factor 1 without points).
func Scaled(ref Model, points []Point) Transferred {
	if len(points) == 0 {
		return Transferred{Ref: ref, Factor: 1}
	}
	var s float64
	for _, p := range points {
		s += math.Log(p.StepTime / ref.StepTime(p.Nodes, p.Replicas, p.LocalBatch))
	}
	return Transferred{Ref: ref, Factor: math.Exp(s / float64(len(points)))}
}

// line fits y = a + b·x by ordinary least squares (gonum stat.LinearRegression).
func line(x, y []float64) (a, b float64) {
	if distinct(x) < 2 {
		var s float64
		for _, v := range y {
			s += v
		}
		return s / float64(len(y)), 0
	}
	return linearRegression(x, y)
}

func distinct(x []float64) int {
	c := append([]float64(nil), x...)
	sort.Float64s(c)
	n := 0
	for i := range c {
		if i == 0 || c[i] != c[i-1] {
			n++
		}
	}
	return n
}
