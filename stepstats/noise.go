package stepstats

import (
	"math"
	"sort"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// NoiseWarmup is the number of samples an estimate averages (since its
// last restart) before Noise gives it: the first ones are too few to read.
const NoiseWarmup = 10

// Noise follows the gradient noise scale along one job's steps, step by
// step: each step's Sample updates a gns.Estimator on its own (the
// controller averages a window of steps first, so its estimate is
// smoother). The zero value has no base batch and takes no sample.
type Noise struct {
	// M0 is the base batch the scale is measured against (the job's first
	// global batch).
	M0  float64
	est gns.Estimator
}

// Add updates the estimate with record r's sample and reports whether it
// took one (a record without one, or one the estimator refuses, leaves it
// as it was).
func (n *Noise) Add(r telemetry.StepRecord) bool {
	s, ok := Sample(r, n.M0)
	if !ok {
		return false
	}
	e, err := n.est.Update(s)
	if err != nil {
		return false
	}
	n.est = e
	return true
}

// Scale is the gradient noise scale in samples; ok is false (and the scale
// 0) until the estimate averages NoiseWarmup samples, or when it is not
// finite.
func (n *Noise) Scale() (v float64, ok bool) {
	if n.est.Steps() < NoiseWarmup {
		return 0, false
	}
	v = n.est.NoiseScale(n.M0)
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, false
	}
	return v, true
}

// Point is one point of a series over a job's time.
type Point struct {
	// T is the time in seconds since the job started; V the value.
	T float64 `json:"t_s"`
	V float64 `json:"v"`
	// Attempt is the attempt the point belongs to, for a series that says
	// (0: it does not).
	Attempt int `json:"attempt,omitempty"`
}

// NoiseSeries is the gradient noise scale along rank 0's steps in recs
// (any order), as Noise follows it against base batch m0: one point per
// step once it gives one, at seconds since t0 (Unix seconds), at most n
// points (evenly thinned, the first and the last kept; with n = 1 the last). Steps without a sample are skipped.
func NoiseSeries(recs []telemetry.StepRecord, m0, t0 float64, n int) []Point {
	if m0 <= 0 || n <= 0 {
		return nil
	}
	var rs []*telemetry.StepRecord // pointers, not copies: a long job's records are many
	for i := range recs {
		if recs[i].Rank == 0 {
			rs = append(rs, &recs[i])
		}
	}
	sort.SliceStable(rs, func(a, b int) bool { return rs[a].Step < rs[b].Step })
	noise := Noise{M0: m0}
	var all []Point
	for _, r := range rs {
		if !noise.Add(*r) {
			continue
		}
		if v, ok := noise.Scale(); ok {
			all = append(all, Point{T: r.Time - t0, V: v})
		}
	}
	switch {
	case len(all) <= n:
		return all
	case n == 1:
		return all[len(all)-1:]
	}
	out := make([]Point, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, all[i*(len(all)-1)/(n-1)])
	}
	return out
}
