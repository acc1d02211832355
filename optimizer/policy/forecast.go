package policy

import (
	"math"

	"github.com/scavenger-ml/scavenger/optimizer/efficiency"
	"github.com/scavenger-ml/scavenger/optimizer/perf"
)

const (
	// maxGrowthExponent bounds the power-law exponent of the noise forecast.
	maxGrowthExponent = 3
	// forecastDecay is the EMA factor per M0-sized batch of the noise
	// estimate: a shorter memory than AdaptDL's 0.999, since the forecast
	// needs the current noise scale, not last epoch's.
	forecastDecay = 0.99
)

// noiseIntegral forecasts the noise ratio u = φ/M0 over the rest of the job
// with a power law in progress, u(p) = u_now·(p/p_now)^a, a fitted by least
// squares of ln φ on ln p (over the recent half of progress once there are
// eight reports) and clamped to [0, maxGrowthExponent], and returns
// ∫ dp/(1+u(p)) over the remaining work (0 without a usable fit). The traces'
// noise scales grow roughly as p^0.2 (bert) to p^2 (deepspeech2, ncf).
func (t *tracker) noiseIntegral() float64 {
	if len(t.stored.growth) > 0 {
		return t.storedIntegral() // an earlier run's curve (learn.go)
	}
	xs, ys := t.growthWindow()
	if len(xs) < 3 || xs[len(xs)-1] <= xs[0] {
		return 0
	}
	now := t.growth[len(t.growth)-1].progress
	_, a := perf.Line(xs, ys)
	if math.IsNaN(a) || a <= 0 {
		return 0
	}
	// The fitted exponent is the best estimate even when it has seen
	// little progress; whether to trust it is forecastMature's question,
	// and decisions taken before are provisional and revisited.
	a = math.Min(a, maxGrowthExponent)
	u0 := t.est.Var() / math.Max(t.est.Sqr(), 1e-300)
	return efficiency.ForecastIntegral(now, math.Max(t.spec.Target, now), u0, a)
}

// growthWindow returns ln progress and ln φ of the reports the noise
// forecast fits: all of them, or the recent half of progress once there are
// eight.
func (t *tracker) growthWindow() (xs, ys []float64) {
	if len(t.growth) < 3 {
		return nil, nil
	}
	from := 0.0
	if len(t.growth) >= 8 {
		from = t.growth[len(t.growth)-1].progress / 2
	}
	for _, g := range t.growth {
		if g.progress > 0 && g.progress >= from {
			xs = append(xs, math.Log(g.progress))
			ys = append(ys, g.lnPhi)
		}
	}
	return xs, ys
}

// forecastMature reports whether the noise forecast can be trusted over the
// rest of the job: the noise estimate it starts from is reliable (the
// warm-up gate, tracker.warm), and a power law fitted on progress from
// p_first to p_now is extrapolated to the target, trusted over no more
// orders of magnitude than it has seen — p_now/p_first ≥ target/p_now —
// with at least three reports and a quadrupling of progress. A
// throughput-only job has no forecast to wait for, and the paper's
// statistical model none to make.
func (t *tracker) forecastMature() bool {
	if !t.warm() {
		return false
	}
	if t.throughputOnly() || t.storedMature() {
		return true
	}
	if t.spec.StatModel == StatPaper {
		if _, ok := t.paperStats(); ok {
			return true
		}
	}
	if xs, _ := t.growthWindow(); len(xs) < 3 {
		return false
	}
	first := t.growth[0].progress
	now := t.growth[len(t.growth)-1].progress
	if !(first > 0) || now < 4*first {
		return false
	}
	return now/first >= t.spec.Target/now
}
