// Package efficiency holds the statistical-efficiency formulas that turn a
// gradient noise estimate into progress: the AdaScale gain (Johnson et al.
// 2020), Pollux's efficiency (φ + M0)/(φ + M) (Qiao et al. 2021), progress
// counted in scale-invariant iterations (AdaptDL), and the remaining work.
// All functions are pure.
package efficiency

import (
	"fmt"
	"math"
)

// Gain is the AdaScale gain of one step at scale S = M/M0 given |G|² (sqr)
// and tr Σ at batch M0 (vari): (vari + sqr)/(vari/S + sqr). It is the number
// of M0-sized steps that one step at batch M is worth, in [1, S].
func Gain(sqr, vari, scale float64) float64 {
	if scale <= 1 {
		return scale
	}
	sqr = math.Max(sqr, 0)
	vari = math.Max(vari, 0)
	den := vari/scale + sqr
	if den <= 0 {
		return 1
	}
	return (vari + sqr) / den
}

// NoiseScale is the gradient noise scale φ = M0·vari/sqr relative to batch
// M0 (McCandlish's B_simple when vari is tr Σ at batch M0).
func NoiseScale(sqr, vari, m0 float64) float64 {
	if sqr <= 0 {
		return math.Inf(1)
	}
	return m0 * vari / sqr
}

// Efficiency is Pollux's statistical efficiency of total batch m relative to
// m0: (φ + m0)/(φ + m). It equals Gain/scale.
func Efficiency(phi, m0, m float64) float64 {
	if math.IsInf(phi, 1) {
		return 1
	}
	return (phi + m0) / (phi + m)
}

// Goodput is progress per second: the gain of a step divided by its time.
func Goodput(gain, stepTime float64) float64 { return gain / stepTime }

// Remaining is the scale-invariant work left: target − done, never negative.
func Remaining(target, done float64) float64 { return math.Max(target-done, 0) }

// Steps returns the optimizer steps needed to cover remaining work at gain per
// step.
func Steps(remaining, gain float64) (float64, error) {
	if !(gain > 0) || math.IsInf(gain, 0) || remaining < 0 || math.IsNaN(remaining) {
		return 0, fmt.Errorf("steps for remaining %g at gain %g: %w", remaining, gain, ErrBadInput)
	}
	return remaining / gain, nil
}

// ForecastIntegral is ∫ dp/(1+u(p)) from p0 to p1 when the noise ratio
// u = φ/M0 = tr Σ_M0/|G|² follows the power law u(p) = u0·(p/p0)^a in
// progress p (a = 0: constant noise). The steps at scale s to go from p0 to
// p1 are then (p1−p0)/s + (1−1/s)·ForecastIntegral (see Gain). It uses
// composite Simpson's rule on 512 intervals in log p.
func ForecastIntegral(p0, p1, u0, a float64) float64 {
	if p1 <= p0 {
		return 0
	}
	if a == 0 || u0 <= 0 || p0 <= 0 {
		return (p1 - p0) / (1 + math.Max(u0, 0))
	}
	return IntegralLog(p0, p1, 512, func(p float64) float64 { return 1 / (1 + u0*math.Pow(p/p0, a)) })
}

// IntegralLog is ∫ f(p) dp from p0 to p1 (0 < p0 < p1) by composite
// Simpson's rule on n (even) intervals in log p: the substitution p = e^t
// spreads the points evenly over the orders of magnitude a forecast spans.
func IntegralLog(p0, p1 float64, n int, f func(p float64) float64) float64 {
	if !(p1 > p0) || !(p0 > 0) {
		return 0
	}
	t0, t1 := math.Log(p0), math.Log(p1)
	h := (t1 - t0) / float64(n)
	g := func(t float64) float64 { p := math.Exp(t); return p * f(p) }
	sum := g(t0) + g(t1)
	for i := 1; i < n; i++ {
		w := 2.0
		if i%2 == 1 {
			w = 4
		}
		sum += w * g(t0+float64(i)*h)
	}
	return sum * h / 3
}
