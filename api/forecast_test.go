package api

import (
	"math"
	"testing"
	"time"
)

// TestForecast: what is left counts down with the steps the job makes, at
// the speed it runs now, with the decision's interval; a job that runs
// slower than predicted has more left, never nothing while it runs.
func TestForecast(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	d := Decision{Time: at, Step: 100, PredictedStepS: 0.1, PredictedSteps: 1000, PredictedS: 100, PredictedLoS: 80, PredictedHiS: 150,
		PredictedUSD: 1, PredictedUSDLo: 0.8, PredictedUSDHi: 1.5}
	for _, c := range []struct {
		name         string
		ds           []Decision
		step         int64
		stepS        float64
		now          time.Time
		ok, past     bool
		s, lo, hi    float64
		usd, uLo, uH float64
	}{
		{"none predicted", []Decision{{Reason: "probe"}}, 0, 0, at, false, false, 0, 0, 0, 0, 0, 0},
		{"at the decision", []Decision{d}, 100, 0, at, true, false, 100, 80, 150, 1, 0.8, 1.5},
		{"half the steps done, as fast as predicted", []Decision{d}, 600, 0.1, at.Add(time.Hour), true, false, 50, 40, 75, 0.5, 0.4, 0.75},
		{"half done, twice as slow: twice the time, not zero", []Decision{d}, 600, 0.2, at.Add(time.Hour), true, false, 100, 80, 150, 1, 0.8, 1.5},
		{"past the forecast's steps", []Decision{d}, 1200, 0.2, at, true, true, 0.2, 0.2, math.Inf(1), 0.002, 0.002, math.Inf(1)},
		{"the newest that predicted", []Decision{{PredictedS: 9, Time: at}, d, {Reason: "probe"}}, 100, 0, at, true, false, 100, 80, 150, 1, 0.8, 1.5},
		{"no steps predicted: the time since counts down", []Decision{{Time: at, PredictedS: 100, PredictedUSD: 2}}, 0, 0, at.Add(40 * time.Second), true, false, 60, 60, 60, 1.2, 1.2, 1.2},
	} {
		l, ok := Forecast(c.ds, c.step, c.stepS, c.now)
		if ok != c.ok {
			t.Errorf("%s: ok %v", c.name, ok)
			continue
		}
		near := func(a, b float64) bool { return a == b || math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }
		if !ok {
			continue
		}
		if l.Past != c.past || !near(l.S, c.s) || !near(l.LoS, c.lo) || !near(l.HiS, c.hi) || !near(l.USD, c.usd) || !near(l.LoUSD, c.uLo) || !near(l.HiUSD, c.uH) {
			t.Errorf("%s: %+v, want %v s (%v..%v), $%v (%v..%v), past %v", c.name, l, c.s, c.lo, c.hi, c.usd, c.uLo, c.uH, c.past)
		}
		if c.step < 1100 && l.S <= 0 && c.ok && len(c.ds) > 0 && c.ds[len(c.ds)-1].PredictedSteps > 0 {
			t.Errorf("%s: nothing left while steps remain", c.name)
		}
	}
}
