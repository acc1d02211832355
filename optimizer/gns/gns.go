// Package gns estimates the gradient noise scale from per-step gradient
// statistics, following AdaptDL's gradient_noise_scale.py (the algebra of
// McCandlish et al. 2018): the unbiased estimates of |G|² and tr Σ, their
// moving averages with Adam-style bias correction (θ = decay^scale), and the
// single-replica difference estimator. It also gives Scavenger's normalised
// noise γ/K (Tyagi & Sharma 2023, Eq. 2) for reports. Everything here is a
// pure function or an immutable value.
package gns

import (
	"fmt"
	"math"

	"github.com/scavenger-ml/scavenger/optimizer/efficiency"
)

// Sample is the gradient statistics of one optimizer step.
type Sample struct {
	// LocalSqr is the mean over Count independent gradients of their squared
	// norms (each replica's or micro-batch's, before averaging).
	LocalSqr float64
	// TotalSqr is the squared norm of the averaged gradient.
	TotalSqr float64
	// Count is the number of independent gradients averaged (replicas ×
	// accumulation steps).
	Count float64
	// Scale is the total batch of the step divided by the base batch M0.
	Scale float64
	// Biased marks a difference-estimator sample (gradients taken at
	// different weights).
	Biased bool
}

// Validate checks that s can be estimated.
func (s Sample) Validate() error {
	bad := func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) || x < 0 }
	switch {
	case bad(s.LocalSqr) || bad(s.TotalSqr):
		return fmt.Errorf("%w: norms %g, %g", ErrBadSample, s.LocalSqr, s.TotalSqr)
	case math.IsNaN(s.Count) || s.Count < 1 || math.IsInf(s.Count, 0):
		return fmt.Errorf("%w: count %g", ErrBadSample, s.Count)
	case !(s.Scale > 0) || math.IsInf(s.Scale, 0):
		return fmt.Errorf("%w: scale %g", ErrBadSample, s.Scale)
	case s.Count == 1:
		return ErrTooFew
	}
	return nil
}

// Unbiased returns the unbiased estimates of |G|² (sqr) and of tr Σ at batch
// M0 (vari) from one sample:
//
//	sqr  = (count·total − local)/(count − 1)
//	vari = (local − total)·scale/(count − 1)
//
// Either may be negative on one noisy sample; the moving average smooths that.
func Unbiased(s Sample) (sqr, vari float64, err error) {
	if err := s.Validate(); err != nil {
		return 0, 0, fmt.Errorf("estimate noise: %w", err)
	}
	c := s.Count
	sqr = (c*s.TotalSqr - s.LocalSqr) / (c - 1)
	vari = (s.LocalSqr - s.TotalSqr) * s.Scale / (c - 1)
	return sqr, vari, nil
}

// Difference builds the sample of the single-replica difference estimator
// from the previous and the current gradient (flattened, preconditioned),
// taken at scale (batch/M0) each: local = (|p|²+|c|²)/2, total = |(p+c)/2|²,
// count 2, scale 2·scale, marked biased.
func Difference(prev, cur []float64, scale float64) (Sample, error) {
	if len(prev) != len(cur) || len(cur) == 0 {
		return Sample{}, fmt.Errorf("difference estimator: %w: %d and %d", ErrShape, len(prev), len(cur))
	}
	var pp, cc, tt float64
	for i := range cur {
		pp += prev[i] * prev[i]
		cc += cur[i] * cur[i]
		m := (prev[i] + cur[i]) / 2
		tt += m * m
	}
	s := Sample{LocalSqr: (pp + cc) / 2, TotalSqr: tt, Count: 2, Scale: 2 * scale, Biased: true}
	if err := s.Validate(); err != nil {
		return Sample{}, fmt.Errorf("difference estimator: %w", err)
	}
	return s, nil
}

// DefaultDecay is AdaptDL's smoothing: θ = 0.999 per M0-sized batch.
const DefaultDecay = 0.999

// Estimator is an immutable moving-average estimate of |G|² and tr Σ with
// bias correction. The zero value uses DefaultDecay.
type Estimator struct {
	// Decay is the EMA factor per M0-sized batch of samples (0 means
	// DefaultDecay).
	Decay float64

	sqrB, varB, unbias float64
	steps              int
	biased             bool
}

// Update returns the estimator after one more sample. A switch from
// difference (biased) samples back to replica samples resets the averages,
// as AdaptDL does.
func (e Estimator) Update(s Sample) (Estimator, error) {
	return e.UpdateSteps(s, 1)
}

// UpdateSteps is Update for a sample that stands for steps identical steps
// (a telemetry report that summarises several steps): the decay is
// decay^(scale·steps).
func (e Estimator) UpdateSteps(s Sample, steps float64) (Estimator, error) {
	if !(steps > 0) || math.IsInf(steps, 0) {
		return e, fmt.Errorf("estimate noise over %g steps: %w", steps, ErrBadSample)
	}
	sqr, vari, err := Unbiased(s)
	if err != nil {
		return e, err
	}
	if e.biased && !s.Biased {
		e = Estimator{Decay: e.Decay}
	}
	d := e.Decay
	if d == 0 {
		d = DefaultDecay
	}
	theta := math.Pow(d, s.Scale*steps)
	e.sqrB = theta*e.sqrB + (1-theta)*sqr
	e.varB = theta*e.varB + (1-theta)*vari
	e.unbias = theta*e.unbias + (1 - theta)
	e.steps++
	e.biased = s.Biased
	return e, nil
}

// Steps is the number of samples averaged since the last reset.
func (e Estimator) Steps() int { return e.steps }

// Biased reports whether the last sample came from the difference estimator.
func (e Estimator) Biased() bool { return e.biased }

// Sqr is the bias-corrected average of |G|², floored at 0 (1 before any
// sample, as in AdaptDL).
func (e Estimator) Sqr() float64 {
	if e.unbias == 0 {
		return 1
	}
	return math.Max(e.sqrB/e.unbias, 0)
}

// Var is the bias-corrected average of tr Σ at batch M0, floored at 1e-6 (0
// before any sample).
func (e Estimator) Var() float64 {
	if e.unbias == 0 {
		return 0
	}
	return math.Max(e.varB/e.unbias, 1e-6)
}

// NoiseScale is φ = M0·Var/Sqr, the noise scale in samples.
func (e Estimator) NoiseScale(m0 float64) float64 { return efficiency.NoiseScale(e.Sqr(), e.Var(), m0) }

// Gain is the AdaScale gain at scale = batch/M0 under the current estimate.
func (e Estimator) Gain(scale float64) float64 { return efficiency.Gain(e.Sqr(), e.Var(), scale) }

// NormalizedNoise is Scavenger's γ/K: the mean of the workers' squared local
// gradient norms over the squared norm of the averaged gradient, divided by
// the number of workers K. It lies in [1/K, 1] in expectation.
func NormalizedNoise(localSqr, totalSqr float64, workers int) (float64, error) {
	if workers < 1 || !(totalSqr > 0) || localSqr < 0 || math.IsInf(localSqr, 0) || math.IsInf(totalSqr, 0) {
		return 0, fmt.Errorf("normalised noise for %d workers: %w: local %g total %g", workers, ErrBadSample, localSqr, totalSqr)
	}
	return localSqr / totalSqr / float64(workers), nil
}

// Expected returns the expected sample for replicas gradients of local batch
// local each, given |G|² (sqr) and tr Σ at batch m0 (vari): E[local] =
// sqr + vari·m0/local and E[total] = sqr + vari·m0/(local·replicas). One
// replica gives the difference-estimator sample over two consecutive steps.
// The simulator uses it to emit the telemetry a real job would.
func Expected(sqr, vari, m0, local float64, replicas int) Sample {
	if replicas <= 1 {
		return Sample{
			LocalSqr: sqr + vari*m0/local,
			TotalSqr: sqr + vari*m0/(2*local),
			Count:    2,
			Scale:    2 * local / m0,
			Biased:   true,
		}
	}
	k := float64(replicas)
	return Sample{
		LocalSqr: sqr + vari*m0/local,
		TotalSqr: sqr + vari*m0/(local*k),
		Count:    k,
		Scale:    local * k / m0,
	}
}
