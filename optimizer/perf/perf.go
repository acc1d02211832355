// Package perf models the time of one data-parallel optimizer step on one
// machine type as a function of nodes N, replicas K and per-replica batch m.
//
// Two forms are fitted with gonum. Scavenger's (Tyagi & Sharma, CCGrid 2023,
// Eqs. 8–10) is step = (α_c + β_c·m) + (α_s + β_s·K), fitted by ordinary least
// squares on compute and sync times separately; it needs only two probes.
// Pollux's (Qiao et al., OSDI 2021; AdaptDL goodput.py) is
// step = (T_grad^γ + T_sync^γ)^(1/γ) with T_grad = α_c + β_c·m and T_sync
// distinguishing one replica, several replicas on one node, and several
// nodes; it is fitted by minimising RMSLE with gonum/optimize. Fit picks the
// Pollux form when the points can identify it.
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
	// RMSLE is the in-sample root mean squared log error of step time
	// (≈ relative error).
	RMSLE float64
	// Range is the region the measurements cover.
	Range Range
}

// Range is the region of configurations covered by measurements.
type Range struct {
	MinLocal, MaxLocal float64
	MaxReplicas        int
	MaxNodes           int
	SingleNodeMulti    bool // some point has several replicas on one node
	MultiNode          bool // some point spans several nodes
}

// Confidence says how far a prediction at (nodes, replicas, local) can be
// trusted: "measured-range" when the query is inside the measured region and
// the in-sample error is below 5 %, "extrapolated" when outside it, and
// "poor-fit" when the in-sample error is 5 % or more.
func (f *Fitted) Confidence(nodes, replicas int, local float64) string {
	if f.RMSLE >= 0.05 {
		return "poor-fit"
	}
	r := f.Range
	inside := local >= r.MinLocal*(1-1e-9) && local <= r.MaxLocal*(1+1e-9) &&
		replicas <= r.MaxReplicas && nodes <= r.MaxNodes &&
		(nodes == 1 || r.MultiNode) && (nodes > 1 || replicas == 1 || r.SingleNodeMulti)
	if inside {
		return "measured-range"
	}
	return "extrapolated"
}

// Fit validates points and fits the richest form they identify: Pollux's
// when there are at least three distinct configurations with two local
// batch sizes and two replica counts (with AdaptDL's ties between the
// intra- and inter-node sync terms and its regularisers, two local batches
// identify compute and one multi-replica configuration a sync level; on
// the traces this generalises better than the linear form), Scavenger's
// otherwise with two or more, and Measured (that configuration only) with
// one.
func Fit(points []Point) (*Fitted, error) {
	if err := validate(points); err != nil {
		return nil, err
	}
	s := summarise(points)
	var (
		m   Model
		err error
	)
	switch {
	case s.configs == 1:
		m = onePoint(points)
	case s.configs >= 3 && s.locals >= 2 && s.replicaCounts >= 2:
		m, err = FitPollux(points)
	default:
		m, err = FitScavenger(points)
	}
	if err != nil {
		return nil, err
	}
	return finish(m, points), nil
}

func finish(m Model, points []Point) *Fitted {
	s := summarise(points)
	var sum float64
	for _, p := range points {
		d := math.Log(m.StepTime(p.Nodes, p.Replicas, p.LocalBatch)) - math.Log(p.StepTime)
		sum += d * d
	}
	return &Fitted{Model: m, Points: len(points), Configs: s.configs, RMSLE: math.Sqrt(sum / float64(len(points))), Range: s.rng}
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
	rng                            Range
}

func summarise(points []Point) summary {
	type key struct {
		n, k int
		m    float64
	}
	cfg := map[key]bool{}
	ms := map[float64]bool{}
	ks := map[int]bool{}
	r := Range{MinLocal: math.Inf(1)}
	for _, p := range points {
		cfg[key{p.Nodes, p.Replicas, p.LocalBatch}] = true
		ms[p.LocalBatch] = true
		ks[p.Replicas] = true
		r.MinLocal = math.Min(r.MinLocal, p.LocalBatch)
		r.MaxLocal = math.Max(r.MaxLocal, p.LocalBatch)
		r.MaxReplicas = max(r.MaxReplicas, p.Replicas)
		r.MaxNodes = max(r.MaxNodes, p.Nodes)
		r.SingleNodeMulti = r.SingleNodeMulti || (p.Nodes == 1 && p.Replicas > 1)
		r.MultiNode = r.MultiNode || p.Nodes > 1
	}
	return summary{configs: len(cfg), locals: len(ms), replicaCounts: len(ks), rng: r}
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

func onePoint(points []Point) Measured {
	var sum float64
	for _, p := range points {
		sum += p.StepTime
	}
	p := points[0]
	return Measured{Nodes: p.Nodes, Replicas: p.Replicas, LocalBatch: p.LocalBatch, Step: sum / float64(len(points))}
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
// distinct x the slope is zero and the intercept is the mean.
func FitScavenger(points []Point) (Scavenger, error) {
	if err := validate(points); err != nil {
		return Scavenger{}, err
	}
	xs, cs, ks, ss := make([]float64, len(points)), make([]float64, len(points)), make([]float64, len(points)), make([]float64, len(points))
	for i, p := range points {
		xs[i], cs[i] = p.LocalBatch, p.StepTime-p.SyncTime
		ks[i], ss[i] = float64(p.Replicas), p.SyncTime
	}
	ac, bc := line(xs, cs)
	as, bs := line(ks, ss)
	return Scavenger{AlphaC: ac, BetaC: bc, AlphaS: as, BetaS: bs}, nil
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
