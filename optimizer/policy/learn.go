package policy

import (
	"math"
	"sort"

	"github.com/scavenger-ml/scavenger/optimizer/efficiency"
	"github.com/scavenger-ml/scavenger/optimizer/perf"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/optimizer/prior"
)

// What earlier jobs teach (Spec.Prior)
//
// A job whose signature ran before starts from what those runs measured
// (package prior), and probes only where that leaves it unsure:
//
//   - Step times: a type's earlier measurements join the job's own in its
//     fit, scaled first by how fast this job runs where both measured (the
//     geometric mean ratio of its measurements to the earlier ones' fit), so
//     that a machine that runs uniformly slower or faster this time moves
//     them all; the configurations this job measured replace the earlier
//     ones. The fit's cross-validated error is the interval of every
//     configuration this job did not measure, so a configuration is probed
//     only where that interval leaves room to beat the incumbent by more
//     than the probe costs (tracker.nextProbe).
//   - Noise: the earlier run's noise scale along training is the forecast
//     (shifted to the level this job measures now, once it measures any),
//     an observation over the whole job instead of an extrapolation: the
//     warm-up gate passes at once and the forecast is mature as far as the
//     curve reaches.
//   - Relaunch: the one earlier jobs measured, until this job measures its
//     own.
//   - Types nobody measured for this signature take the speed ratio other
//     signatures measured between types (tracker.transfer) instead of the
//     price prior.
//
// With its models, a job can start where they say before it runs a step
// (Start); none (the paper's no-search) never probes at all.

// storedKnowledge is the prior as the tracker uses it: the noise curve in
// progress units and each type's earlier measurements.
type storedKnowledge struct {
	growth []phiPoint
	points map[string][]perf.Point
	fits   map[string]*perf.Fitted // of points, each type's, once needed
}

func newStored(spec Spec) storedKnowledge {
	s := storedKnowledge{points: map[string][]perf.Point{}, fits: map[string]*perf.Fitted{}}
	p := spec.Prior
	if p == nil || !(spec.M0 > 0) {
		return s
	}
	for typ, ps := range p.Points {
		for _, q := range ps {
			if pp := q.Perf(); pp.Validate() == nil {
				s.points[typ] = append(s.points[typ], pp)
			}
		}
	}
	for _, n := range p.Noise {
		if n.Samples > 0 && n.Phi > 0 && !math.IsInf(n.Phi, 0) {
			s.growth = append(s.growth, phiPoint{n.Samples / spec.M0, math.Log(n.Phi)})
		}
	}
	sort.Slice(s.growth, func(i, j int) bool { return s.growth[i].progress < s.growth[j].progress })
	return s
}

// storedPoints are typ's earlier measurements at the configurations own
// (this job's) has not measured, scaled by how this job's measurements
// compare with the earlier ones' fit.
func (t *tracker) storedPoints(typ string, own []perf.Point) []perf.Point {
	st := t.stored.points[typ]
	if len(st) == 0 {
		return nil
	}
	f := t.stored.fits[typ]
	if f == nil {
		var err error
		if f, err = perf.Fit(st); err != nil {
			return nil
		}
		t.stored.fits[typ] = f
	}
	var sum float64
	var n int
	type key struct {
		n, k int
		m    float64
	}
	mine := map[key]bool{}
	for _, p := range own {
		mine[key{p.Nodes, p.Replicas, p.LocalBatch}] = true
		if v := f.StepTime(p.Nodes, p.Replicas, p.LocalBatch); v > 0 && !math.IsInf(v, 0) {
			sum += math.Log(p.StepTime / v)
			n++
		}
	}
	scale := 1.0
	if n > 0 {
		scale = math.Exp(sum / float64(n))
	}
	var out []perf.Point
	for _, p := range st {
		if mine[key{p.Nodes, p.Replicas, p.LocalBatch}] {
			continue
		}
		p.StepTime *= scale
		p.SyncTime *= scale
		out = append(out, p)
	}
	return out
}

// storedLnPhi is ln φ of the stored noise curve at progress p: linear in
// ln progress between its points, its first and last segments extended
// (the last one's slope held within [0, maxGrowthExponent]).
func (t *tracker) storedLnPhi(p float64) float64 {
	g := t.stored.growth
	if len(g) == 1 || p <= 0 {
		return g[0].lnPhi
	}
	i := sort.Search(len(g), func(i int) bool { return g[i].progress >= p })
	switch {
	case i == 0:
		i = 1
	case i == len(g):
		i = len(g) - 1
	}
	a, b := g[i-1], g[i]
	if !(b.progress > a.progress) || !(a.progress > 0) {
		return b.lnPhi
	}
	slope := (b.lnPhi - a.lnPhi) / math.Log(b.progress/a.progress)
	if p > b.progress {
		slope = math.Min(math.Max(slope, 0), maxGrowthExponent)
	}
	return a.lnPhi + slope*math.Log(p/a.progress)
}

// storedShift is how far (in ln φ) this job's noise estimate lies from the
// stored curve at its latest report (0 before any).
func (t *tracker) storedShift() float64 {
	n := len(t.growth)
	if n == 0 {
		return 0
	}
	last := t.growth[n-1]
	return last.lnPhi - t.storedLnPhi(last.progress)
}

// storedIntegral is ∫ dp/(1+u(p)) over the remaining work with u = φ/M0 on
// the stored curve shifted to this job's level.
func (t *tracker) storedIntegral() float64 {
	p0, p1 := math.Max(t.last.Progress, 1e-9), t.spec.Target
	if p1 <= p0 {
		return 0
	}
	shift := t.storedShift() - math.Log(t.spec.M0)
	return efficiency.IntegralLog(p0, p1, 256, func(p float64) float64 { return 1 / (1 + math.Exp(t.storedLnPhi(p)+shift)) })
}

// storedMature reports whether the stored noise curve reaches far enough
// to stand for the forecast: within a fifth of the target.
func (t *tracker) storedMature() bool {
	g := t.stored.growth
	return len(g) >= 2 && g[len(g)-1].progress >= 0.8*t.spec.Target
}

// noiseNow is |G|² and tr Σ (at M0) to predict with: the job's estimate,
// or before it has any, the stored curve's noise at its progress.
func (t *tracker) noiseNow() (sqr, vari float64) {
	if !t.grads && len(t.stored.growth) > 0 {
		return 1, math.Exp(t.storedLnPhi(t.last.Progress)) / t.spec.M0
	}
	return t.est.Sqr(), t.est.Var()
}

// startAt is Start for the policies that may start elsewhere: where the
// models of the prior (and the noise curve) say the whole job does best,
// chosen on the pessimistic end of each prediction like every other
// decision, when that is not from.
func (t *tracker) startAt(from predict.Candidate) (Decision, bool) {
	if t.reports > 0 || len(t.stored.points) == 0 {
		return Decision{}, false
	}
	ms, err := t.fit()
	if err != nil {
		return Decision{}, false
	}
	// Nothing runs yet: no candidate pays a relaunch.
	preds, err := t.predictAt(ms.models, predict.Candidate{})
	if err != nil {
		return Decision{}, false
	}
	for i := range preds {
		p := &preds[i]
		p.TotalS, p.TotalSLo, p.TotalSHi = p.TotalS-p.SwitchS, p.TotalSLo-p.SwitchS, p.TotalSHi-p.SwitchS
		p.TotalUSD, p.TotalUSDLo, p.TotalUSDHi = p.TotalUSD-p.SwitchUSD, p.TotalUSDLo-p.SwitchUSD, p.TotalUSDHi-p.SwitchUSD
		p.SwitchS, p.SwitchUSD = 0, 0
	}
	ch, err := t.choose(preds)
	if err != nil || preds[ch.Index].Candidate == from {
		return Decision{}, false
	}
	return Decision{Config: preds[ch.Index].Candidate, Reason: "start where the stored model says: " + ch.Reason, Phase: PhaseOptimised,
		Predictions: preds, Chosen: ch.Index, FittedTypes: ms.fitted, WaitSteps: t.spec.ProbeSteps}, true
}

// Start implements Policy: a fixed job starts where it is told.
func (p *fixed) Start(predict.Candidate) (Decision, bool) { return Decision{}, false }

// Start implements Policy: a full search measures everything anyway.
func (p *search) Start(predict.Candidate) (Decision, bool) { return Decision{}, false }

// Start implements Policy.
func (p *partial) Start(from predict.Candidate) (Decision, bool) { return p.t.startAt(from) }

// Start implements Policy.
func (p *none) Start(from predict.Candidate) (Decision, bool) { return p.t.startAt(from) }

// Start implements Policy.
func (p *adaptive) Start(from predict.Candidate) (Decision, bool) { return p.t.startAt(from) }

// maxNoisePoints bounds the noise curve a job leaves for later ones.
const maxNoisePoints = 64

// learned is what the job taught (see Policy.Learned).
func (t *tracker) learned() prior.Learned {
	var l prior.Learned
	for c, m := range t.meas {
		if !(m.steps > 0) || !(m.step > 0) {
			continue
		}
		if l.Types == nil {
			l.Types = map[string][]prior.Point{}
		}
		l.Types[c.Type] = append(l.Types[c.Type], prior.Point{Nodes: c.Nodes, Replicas: c.Workers, LocalBatch: c.Local(), StepS: m.step, SyncS: m.sync, Steps: m.steps})
	}
	for _, ps := range l.Types {
		sort.Slice(ps, func(i, j int) bool {
			a, b := ps[i], ps[j]
			return placementLess(a.Replicas, a.Nodes, a.LocalBatch, b.Replicas, b.Nodes, b.LocalBatch)
		})
	}
	for _, g := range t.growth {
		l.Noise = append(l.Noise, prior.NoisePoint{Samples: g.progress * t.spec.M0, Phi: math.Exp(g.lnPhi)})
	}
	l.Noise = prior.Thin(l.Noise, maxNoisePoints)
	l.RelaunchS = append(l.RelaunchS, t.relaunches...)
	return l
}

// Learned implements Policy.
func (p *fixed) Learned() prior.Learned { return p.t.learned() }

// Learned implements Policy.
func (p *search) Learned() prior.Learned { return p.t.learned() }

// Learned implements Policy.
func (p *partial) Learned() prior.Learned { return p.t.learned() }

// Learned implements Policy.
func (p *none) Learned() prior.Learned { return p.t.learned() }

// Learned implements Policy.
func (p *adaptive) Learned() prior.Learned { return p.t.learned() }
