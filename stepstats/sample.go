// Package stepstats owns what a job's step records (telemetry.StepRecord)
// add up to, in one implementation for every reader: the gradient-noise
// sample of a record (Sample), its mean over a window of steps (Window, as
// the daemon's controller reports them), the noise scale along a job's steps
// (Noise, NoiseSeries), the samples per second over the last steps (Rate),
// what top shows of a running job (Live) and the summary of a job's steps
// (Summarize). An Aggregate keeps all of it as records come, in a few
// kilobytes whatever their number (its medians a Hist's, its steps Spans),
// so that a daemon keeps it per job and a reader need not replay them. It
// is pure: records and numbers in, values out; no clock.
package stepstats

import (
	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// Gradients is the number of independent gradients averaged into r's
// AvgSqr: r.Count when the worker gave one, else r.World (one gradient per
// worker).
func Gradients(r telemetry.StepRecord) int {
	if r.Count > 0 {
		return r.Count
	}
	return r.World
}

// Sample is the gradient-noise sample of step record r against the base
// batch m0: the mean local and the averaged squared gradient norms,
// Count = Gradients(r), Scale = Count·r.LocalBatch/m0 (the samples of the
// Count gradients, each over LocalBatch samples as replicas' and the
// difference estimator's are, over m0) and r.Biased (the single worker's
// difference estimator).
//
// ok is true exactly when gns accepts the sample, so it is false for a
// record without both norms, with LocalBatch ≤ 0, or for m0 ≤ 0; and for a
// record of a single gradient (a world of one without Count, or Count 1: a
// lone worker's first step, before the difference estimator has a previous
// gradient), because the unbiased estimator needs two (gns.ErrTooFew) and a
// single gradient carries no noise to measure.
func Sample(r telemetry.StepRecord, m0 float64) (s gns.Sample, ok bool) {
	if r.LocalSqr == nil || r.AvgSqr == nil || r.LocalBatch <= 0 || !(m0 > 0) {
		return gns.Sample{}, false
	}
	count := float64(Gradients(r))
	s = gns.Sample{LocalSqr: *r.LocalSqr, TotalSqr: *r.AvgSqr, Count: count,
		Scale: count * float64(r.LocalBatch) / m0, Biased: r.Biased}
	if s.Validate() != nil {
		return gns.Sample{}, false
	}
	return s, true
}

// Window averages the samples of consecutive steps (Sample) into one, as
// the daemon's controller does over the steps of a report before it
// updates its estimator. The zero value is an empty window.
//
// Like gns.Estimator, it lets replica samples supersede difference-estimator
// ones: an unbiased sample after biased ones restarts the window.
type Window struct {
	local, total float64
	weight       float64
	last         gns.Sample
	biased       bool
	n            int
}

// Add adds the sample of record r against the base batch m0 and reports
// whether r had one (Sample).
func (w *Window) Add(r telemetry.StepRecord, m0 float64) bool {
	return w.AddN(r, m0, 1)
}

// AddN is Add for a record that stands for steps identical steps (the
// simulator's): its sample weighs steps in the mean.
func (w *Window) AddN(r telemetry.StepRecord, m0, steps float64) bool {
	s, ok := Sample(r, m0)
	if !ok || !(steps > 0) {
		return false
	}
	if w.biased && !s.Biased {
		*w = Window{}
	}
	w.local += steps * s.LocalSqr
	w.total += steps * s.TotalSqr
	w.weight += steps
	w.biased = w.biased || s.Biased
	w.last = s
	w.n++
	return true
}

// N is the number of records whose samples are in the window.
func (w *Window) N() int { return w.n }

// Mean is the window's sample: the mean LocalSqr and TotalSqr of its
// samples, the Count and Scale of the last one (a window is meant to span
// one configuration) and Biased when any of them is. ok is false when the
// window is empty.
func (w *Window) Mean() (s gns.Sample, ok bool) {
	if w.n == 0 {
		return gns.Sample{}, false
	}
	return gns.Sample{LocalSqr: w.local / w.weight, TotalSqr: w.total / w.weight, Count: w.last.Count, Scale: w.last.Scale, Biased: w.biased}, true
}

// Update folds the window's mean into e as steps steps
// (gns.Estimator.UpdateSteps) and returns the new estimator and the mean.
// An empty window, or a mean e refuses, leaves e as it was and gives the
// zero Sample (Count 0: no gradient statistics). The window is left as it
// is; Reset empties it.
func (w *Window) Update(e gns.Estimator, steps float64) (gns.Estimator, gns.Sample) {
	s, ok := w.Mean()
	if !ok {
		return e, gns.Sample{}
	}
	next, err := e.UpdateSteps(s, steps)
	if err != nil {
		return e, gns.Sample{}
	}
	return next, s
}

// Reset empties the window.
func (w *Window) Reset() { *w = Window{} }
