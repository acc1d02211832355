package policy

import (
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// Drift: a job's step time changes as it trains, in every configuration
// alike (a CNN on CPU slowed by 10 % from its first steps to its last, in
// every fixed run). A configuration measured early in the job then looks
// faster than the one the job has run in since, whose measurement follows
// the drift, and the policy moves to it and back: a live job went batch
// 128 → 64 → 128 → 64 → 128 on one machine, each move predicted to gain
// 5 %, each stay at 64 measured slower than its early probe.
//
// The tracker fits the drift as one slope β of ln(step time) in the job's
// progress, shared by every configuration: the within estimator over the
// reports of each configuration measured more than once (a configuration's
// own level is its mean; the slope is what its reports have in common).
// When the slope differs from 0 at the 95 % level (a t test on its
// standard error), each configuration is predicted at the job's current
// progress: its measured step time times e^(β·(now − the mean progress of
// its reports)). Without a significant slope nothing changes.

// driftSums are one configuration's sums over its reports: n reports, at
// mean progress p (the report's midpoint) with ln(step time) y.
type driftSums struct{ n, p, y, pp, py, yy float64 }

func (d *driftSums) add(p, y float64) {
	d.n++
	d.p += p
	d.y += y
	d.pp += p * p
	d.py += p * y
	d.yy += y * y
}

// driftSlope is β, and whether it is significant.
func (t *tracker) driftSlope() (float64, bool) {
	var sxx, sxy, syy, reports, configs float64
	for _, m := range t.meas {
		d := m.drift
		if d.n < 2 {
			continue
		}
		sxx += d.pp - d.p*d.p/d.n
		sxy += d.py - d.p*d.y/d.n
		syy += d.yy - d.y*d.y/d.n
		reports += d.n
		configs++
	}
	dof := reports - configs - 1
	if !(sxx > 0) || dof < 1 {
		return 0, false
	}
	beta := sxy / sxx
	rss := math.Max(syy-beta*sxy, 0)
	se := math.Sqrt(rss / dof / sxx)
	tq := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: dof}.Quantile(0.975)
	return beta, math.Abs(beta) > tq*se
}

// stepNow is m's step and sync time at the job's current progress (see
// Drift): its measured means, moved along a significant drift.
func (t *tracker) stepNow(m *measurement) (step, sync float64) {
	beta, ok := t.driftSlope()
	if !ok || m.drift.n == 0 {
		return m.step, m.sync
	}
	f := math.Exp(beta * (t.last.Progress - m.drift.p/m.drift.n))
	return m.step * f, m.sync * f
}
