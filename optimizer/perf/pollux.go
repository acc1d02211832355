package perf

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/optimize"
	"gonum.org/v1/gonum/stat"
)

func linearRegression(x, y []float64) (a, b float64) {
	return stat.LinearRegression(x, y, nil, false)
}

// Pollux is the Pollux/AdaptDL step-time form without gradient accumulation:
//
//	T_grad = α_c + β_c·m
//	T_sync = 0 (K = 1); α_r + β_r·max(K−2, 0) (one node); α_n + β_n·max(K−2, 0) (several nodes)
//	T      = (T_grad^γ + T_sync^γ)^(1/γ),  γ ∈ [1, 10]
type Pollux struct {
	AlphaC, BetaC float64
	AlphaR, BetaR float64
	AlphaN, BetaN float64
	Gamma         float64
	// Delta is our extension: T_grad = α_c + β_c·m^δ with δ ∈ [0.5, 1.5]
	// (0 means 1, AdaptDL's linear compute).
	Delta float64
}

// Form implements Model.
func (Pollux) Form() Form { return FormPollux }

// Grad returns the compute time of one step at local batch m.
func (p Pollux) Grad(local float64) float64 {
	if p.Delta == 0 || p.Delta == 1 {
		return p.AlphaC + p.BetaC*local
	}
	return p.AlphaC + p.BetaC*math.Pow(local, p.Delta)
}

// Sync returns the synchronisation time at (nodes, replicas).
func (p Pollux) Sync(nodes, replicas int) float64 {
	if replicas <= 1 {
		return 0
	}
	x := math.Max(float64(replicas-2), 0)
	if nodes <= 1 {
		return p.AlphaR + p.BetaR*x
	}
	return p.AlphaN + p.BetaN*x
}

// StepTime implements Model.
func (p Pollux) StepTime(nodes, replicas int, local float64) float64 {
	g := math.Max(p.Grad(local), 1e-9)
	s := p.Sync(nodes, replicas)
	if s <= 0 {
		return g
	}
	gamma := math.Max(p.Gamma, 1)
	return math.Pow(math.Pow(g, gamma)+math.Pow(s, gamma), 1/gamma)
}

// Free says which parameters of the Pollux form a fit estimates; the others
// are fixed: without AlphaC there is no fixed compute cost (α_c = 0, the
// compute a power of the local batch: Scavenger's Eq. 9), without Delta
// δ = 1 — or ½ with Root —, without Gamma γ = 1 (no overlap: compute plus
// sync, Scavenger's Eq. 8). Single and Multi are the sync parameters of
// one-node and multi-node placements: 2 (level and slope in K), 1 (level;
// slope 0) or 0 (none measured: tied to the other regime by AdaptDL's
// factor 1.1, or no sync at all when neither is).
type Free struct {
	AlphaC, Delta, Gamma bool
	// Root: compute ∝ √m. With a single local batch measured, nothing tells
	// a fixed cost per step (flat in m) from a cost per sample
	// (proportional to m); √m is the geometric middle of the two, and
	// perf.Fitted's intervals span both.
	Root          bool
	Single, Multi int
}

// Count is the number of free parameters.
func (f Free) Count() int {
	n := 1 + f.Single + f.Multi // β_c always
	for _, b := range []bool{f.AlphaC, f.Delta, f.Gamma} {
		if b {
			n++
		}
	}
	return n
}

// Guard returns the parameters the points identify, and in words each
// constraint it had to impose. A parameter is free only if the points vary
// what it describes (two local batches for α_c, four for the exponent δ,
// two values of max(K−2, 0) in a regime for its slope, a multi-replica
// configuration for γ), and the free parameters are at most as many as the
// measurements (the step time of each distinct configuration, and its sync
// time when it has several replicas); beyond that δ, then γ, then the
// regimes' slopes, then α_c are fixed, in that order.
func Guard(points []Point) (Free, []string) {
	s := summarise(points)
	f := Free{AlphaC: s.locals >= 2, Delta: s.locals >= 4, Gamma: s.multiReplica > 0, Root: s.locals < 2,
		Single: min(s.singleXs, 2), Multi: min(s.multiXs, 2)}
	var notes []string
	if s.locals < 2 {
		notes = append(notes, "compute ∝ √(local batch), between flat and proportional (one local batch measured)")
	}
	budget := s.configs + s.multiReplica
	for f.Count() > budget {
		switch {
		case f.Delta:
			f.Delta = false
			notes = append(notes, "compute linear in local batch (δ = 1)")
		case f.Gamma:
			f.Gamma = false
			notes = append(notes, "no compute/sync overlap (γ = 1)")
		case f.Multi == 2:
			f.Multi = 1
			notes = append(notes, "multi-node sync flat in K")
		case f.Single == 2:
			f.Single = 1
			notes = append(notes, "one-node sync flat in K")
		case f.AlphaC:
			f.AlphaC = false
			notes = append(notes, "compute ∝ local batch (too few measurements for an intercept)")
		default:
			return f, notes // the minimal form: β_c and one level per measured regime
		}
	}
	return f, notes
}

// FitPollux fits the Pollux form by minimising the RMSLE of step time plus
// the RMSLE of compute time (step − sync), with AdaptDL's regularisers, using
// gonum's Nelder–Mead on log-parameters, estimating only the parameters
// Guard says the points identify. Like AdaptDL, an unmeasured regime is tied
// to the measured one: with no multi-node points α_n, β_n = 1.1·(α_r, β_r);
// with no single-node multi-replica points α_r, β_r = (α_n, β_n)/1.1.
func FitPollux(points []Point) (Pollux, error) {
	if err := validate(points); err != nil {
		return Pollux{}, err
	}
	free, _ := Guard(points)
	return fitPollux(points, free)
}

func fitPollux(points []Point, free Free) (Pollux, error) {
	init, err := FitScavenger(points)
	if err != nil {
		return Pollux{}, err
	}
	// Initial values from per-regime means of sync time.
	var sumR, nR, sumN, nN float64
	for _, p := range points {
		switch {
		case p.Replicas > 1 && p.Nodes == 1:
			sumR += p.SyncTime
			nR++
		case p.Nodes > 1:
			sumN += p.SyncTime
			nN++
		}
	}
	ar, an := 0.01, 0.02
	if nR > 0 {
		ar = math.Max(sumR/nR, 1e-4)
	}
	if nN > 0 {
		an = math.Max(sumN/nN, 1e-4)
	}
	if nR == 0 {
		ar = an / 1.1
	}
	if nN == 0 {
		an = ar * 1.1
	}
	ac := math.Max(init.AlphaC, 1e-4)
	bc := math.Max(init.BetaC, 1e-6)
	if !free.AlphaC {
		bc = math.Max(init.BetaC, 1e-9)
	}
	if free.Root {
		var c, n float64
		for _, p := range points {
			c += math.Max(p.StepTime-p.SyncTime, 1e-9) / math.Sqrt(p.LocalBatch)
			n++
		}
		bc = c / n
	}
	x0 := []float64{math.Log(ac), math.Log(bc), math.Log(ar), math.Log(ar * 0.01), math.Log(an), math.Log(an * 0.01), 0, 0}
	decode := func(x []float64) Pollux { return decodePollux(x, free) }
	obj := func(x []float64) float64 {
		for _, v := range x {
			if math.Abs(v) > 60 {
				return math.Inf(1)
			}
		}
		return polluxLoss(decode(x), points)
	}
	prob := optimize.Problem{Func: obj}
	best := x0
	bestF := obj(x0)
	for restart := 0; restart < 3; restart++ {
		res, err := optimize.Minimize(prob, best, &optimize.Settings{MajorIterations: 4000, FuncEvaluations: 8000}, &optimize.NelderMead{})
		if res == nil {
			return Pollux{}, fmt.Errorf("fit pollux on %d points: %w: %w", len(points), ErrFit, err)
		}
		if res.F < bestF-1e-12 {
			best, bestF = res.X, res.F
			continue
		}
		break
	}
	if math.IsInf(bestF, 0) || math.IsNaN(bestF) {
		return Pollux{}, fmt.Errorf("fit pollux on %d points: %w: objective %g", len(points), ErrFit, bestF)
	}
	return decode(best), nil
}

// decodePollux maps log-parameters to a model, fixing what free leaves fixed.
func decodePollux(x []float64, free Free) Pollux {
	p := Pollux{
		AlphaC: math.Exp(x[0]), BetaC: math.Exp(x[1]),
		AlphaR: math.Exp(x[2]), BetaR: math.Exp(x[3]),
		AlphaN: math.Exp(x[4]), BetaN: math.Exp(x[5]),
		Gamma: 1,
	}
	if !free.AlphaC {
		p.AlphaC = 0
	}
	if free.Gamma {
		p.Gamma = 1 + 9/(1+math.Exp(-x[6]+math.Log(9*1000))) // γ(0) ≈ 1.001
	}
	if free.Delta {
		p.Delta = 0.5 + 1/(1+math.Exp(-x[7])) // δ(0) = 1
	}
	if free.Root {
		p.Delta = 0.5
	}
	if free.Single < 2 {
		p.BetaR = 0
	}
	if free.Multi < 2 {
		p.BetaN = 0
	}
	switch {
	case free.Multi == 0 && free.Single > 0:
		p.AlphaN, p.BetaN = 1.1*p.AlphaR, 1.1*p.BetaR
	case free.Single == 0 && free.Multi > 0:
		p.AlphaR, p.BetaR = p.AlphaN/1.1, p.BetaN/1.1
	case free.Single == 0 && free.Multi == 0:
		p.AlphaR, p.BetaR, p.AlphaN, p.BetaN = 0, 0, 0, 0
	}
	return p
}

// polluxLoss is the fit's objective: RMSLE of step time, half the RMSLE of
// compute time, and AdaptDL's regularisers toward no overlap and flat sync.
func polluxLoss(p Pollux, points []Point) float64 {
	var es, ec float64
	for _, pt := range points {
		d := math.Log(p.StepTime(pt.Nodes, pt.Replicas, pt.LocalBatch)) - math.Log(pt.StepTime)
		es += d * d
		c := math.Max(pt.StepTime-pt.SyncTime, 1e-9)
		d = math.Log(math.Max(p.Grad(pt.LocalBatch), 1e-12)) - math.Log(c)
		ec += d * d
	}
	n := float64(len(points))
	reg := 1e-3 * (p.Gamma - 1) * (p.Gamma - 1)
	if p.AlphaN > 0 && p.AlphaR > 0 {
		reg += 1e-4 * (sq(p.BetaN/p.AlphaN) + sq(p.BetaR/p.AlphaR))
	}
	return math.Sqrt(es/n) + 0.5*math.Sqrt(ec/n) + reg
}

func sq(x float64) float64 { return x * x }
