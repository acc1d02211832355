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
	return math.Pow(math.Pow(g, p.Gamma)+math.Pow(s, p.Gamma), 1/p.Gamma)
}

// FitPollux fits the Pollux form by minimising the RMSLE of step time plus
// the RMSLE of compute time (step − sync), with AdaptDL's regularisers, using
// gonum's Nelder–Mead on log-parameters. Like AdaptDL, parameters the data
// cannot identify are tied: with no multi-node points α_n, β_n = 1.1·(α_r,
// β_r); with no single-node multi-replica points α_r, β_r = (α_n, β_n)/1.1.
func FitPollux(points []Point) (Pollux, error) {
	if err := validate(points); err != nil {
		return Pollux{}, err
	}
	s := summarise(points)
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
	x0 := []float64{math.Log(ac), math.Log(bc), math.Log(ar), math.Log(ar * 0.01), math.Log(an), math.Log(an * 0.01), 0, 0}

	decode := func(x []float64) Pollux {
		p := Pollux{
			AlphaC: math.Exp(x[0]), BetaC: math.Exp(x[1]),
			AlphaR: math.Exp(x[2]), BetaR: math.Exp(x[3]),
			AlphaN: math.Exp(x[4]), BetaN: math.Exp(x[5]),
			Gamma: 1 + 9/(1+math.Exp(-x[6]+math.Log(9*1000))), // γ(0) ≈ 1.001
		}
		if s.locals >= 3 {
			p.Delta = 0.5 + 1/(1+math.Exp(-x[7])) // δ(0) = 1
		}
		if !s.rng.MultiNode {
			p.AlphaN, p.BetaN = 1.1*p.AlphaR, 1.1*p.BetaR
		}
		if !s.rng.SingleNodeMulti {
			p.AlphaR, p.BetaR = p.AlphaN/1.1, p.BetaN/1.1
		}
		return p
	}
	obj := func(x []float64) float64 {
		for _, v := range x {
			if math.Abs(v) > 60 {
				return math.Inf(1)
			}
		}
		p := decode(x)
		var es, ec float64
		for _, pt := range points {
			d := math.Log(p.StepTime(pt.Nodes, pt.Replicas, pt.LocalBatch)) - math.Log(pt.StepTime)
			es += d * d
			c := math.Max(pt.StepTime-pt.SyncTime, 1e-9)
			d = math.Log(p.Grad(pt.LocalBatch)) - math.Log(c)
			ec += d * d
		}
		n := float64(len(points))
		reg := 1e-3*(p.Gamma-1)*(p.Gamma-1) + 1e-2*(sq(p.BetaN/p.AlphaN)+sq(p.BetaR/p.AlphaR))*1e-2
		return math.Sqrt(es/n) + 0.5*math.Sqrt(ec/n) + reg
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

func sq(x float64) float64 { return x * x }
