package policy

import (
	"fmt"
	"math"
	"sort"

	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// paperStats is Scavenger's statistical model (Tyagi & Sharma, §III-C; see
// research/paper.md §2): the normalised noise γ/K falls with the global
// batch as a + c/√B (Eq. 7), and the epochs a job needs grow linearly with
// it, e = e* + θ·γ/K (Eq. 6). Both lines go through the two cold-start
// probes at the smallest K, at the smallest and the largest batch: γ/K is
// their mean normalised noise, and the epochs are what their steps measured
// — w, the samples per unit of progress over M0 (B·steps/(M0·progress)), is
// the job's epochs up to a constant. Steps at batch B for remaining work R
// are R·w(B)·M0/B, with w kept within what a step can be worth: [1, B/M0].
// It makes no noise forecast: the paper decides on the noise of its probes.
type paperStats struct {
	a, c, estar, theta, m0 float64
}

// paperPoint is one cold-start probe: its batch, mean γ/K and measured w.
type paperPoint struct{ batch, gamma, w float64 }

// fitPaper fits the two lines through two cold-start probes at different
// batches.
func fitPaper(pts []paperPoint, m0 float64) (paperStats, error) {
	if len(pts) < 2 || pts[0].batch == pts[1].batch {
		return paperStats{}, fmt.Errorf("fit the paper's statistical model: %w: two cold-start probes at different batches needed", ErrBadObservation)
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].batch < pts[j].batch })
	p, q := pts[0], pts[len(pts)-1]
	x1, x2 := 1/math.Sqrt(p.batch), 1/math.Sqrt(q.batch)
	s := paperStats{m0: m0}
	s.c = (p.gamma - q.gamma) / (x1 - x2)
	s.a = p.gamma - s.c*x1
	if d := p.gamma - q.gamma; math.Abs(d) > 1e-12 {
		s.theta = (p.w - q.w) / d
	}
	s.estar = p.w - s.theta*p.gamma
	return s, nil
}

// Steps implements predict.Statistics.
func (s paperStats) Steps(remaining float64, batch int) float64 {
	b := float64(batch)
	gamma := s.a + s.c/math.Sqrt(b)
	w := s.estar + s.theta*gamma
	w = math.Min(math.Max(w, 1), math.Max(1, b/s.m0))
	return remaining * w * s.m0 / b
}

// coldStart returns the paper's two cold-start probes on the start type:
// the smallest K at its smallest and its largest batch.
func coldStart(cands []predict.Candidate, typ string) []predict.Candidate {
	kmin := 0
	for _, c := range cands {
		if c.Type == typ && (kmin == 0 || c.Workers < kmin) {
			kmin = c.Workers
		}
	}
	var lo, hi *predict.Candidate
	for i, c := range cands {
		if c.Type != typ || c.Workers != kmin {
			continue
		}
		if lo == nil || c.Batch < lo.Batch {
			lo = &cands[i]
		}
		if hi == nil || c.Batch > hi.Batch {
			hi = &cands[i]
		}
	}
	if lo == nil {
		return nil
	}
	if *lo == *hi {
		return []predict.Candidate{*lo}
	}
	return []predict.Candidate{*lo, *hi}
}

// paperStats fits the paper's model on the measured cold-start probes of
// the type the job started on, if both are measured with gradient
// statistics.
func (t *tracker) paperStats() (paperStats, bool) {
	var pts []paperPoint
	for _, c := range coldStart(t.spec.Candidates, t.startType()) {
		m := t.meas[c]
		if m == nil || !t.measured(c) || !(m.gammaSteps > 0) || !(m.progress > 0) {
			return paperStats{}, false
		}
		pts = append(pts, paperPoint{batch: float64(c.Batch), gamma: m.gammaW / m.gammaSteps, w: float64(c.Batch) * m.steps / (t.spec.M0 * m.progress)})
	}
	s, err := fitPaper(pts, t.spec.M0)
	return s, err == nil
}

// nextColdStart is the paper's next cold-start probe to run (StatPaper
// only), if one is left.
func (t *tracker) nextColdStart() (predict.Candidate, bool) {
	if t.spec.StatModel != StatPaper || t.throughputOnly() {
		return predict.Candidate{}, false
	}
	for _, c := range coldStart(t.spec.Candidates, t.startType()) {
		if !t.measured(c) {
			return c, true
		}
	}
	return predict.Candidate{}, false
}
