package control

import (
	"math"
	"testing"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// TestObserverReports: a report every ten steps after the warm-up, with the
// mean step time and the window's gradient sample, the local batch taken
// from the attempt when the worker does not say it.
func TestObserverReports(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, c := range []struct {
		name       string
		localBatch int
		world      int
		wantGrad   bool
	}{
		{"records with their local batch", 8, 2, true},
		{"records without it", 0, 2, true},
		{"one worker, no difference estimate", 8, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newObserver(16, 1, "local")
			o.attemptStarted(1, plugins.Config{Workers: c.world, GlobalBatch: 8 * c.world})
			var reports int
			for step := int64(1); step <= warmupSteps+defaultReportSteps; step++ {
				obs, ok := o.add(telemetry.StepRecord{V: 1, Job: "j", Attempt: 1, Rank: 0, World: c.world, Step: step, Time: float64(step) * 0.1,
					Seconds: 0.1, Samples: 8, LocalBatch: c.localBatch, LocalSqr: f(2), AvgSqr: f(1.5)})
				if !ok {
					continue
				}
				reports++
				if obs.Steps != defaultReportSteps || math.Abs(obs.StepTime-0.1) > 1e-9 {
					t.Errorf("report of %v steps at %v s", obs.Steps, obs.StepTime)
				}
				if got := obs.Grad.Count > 0; got != c.wantGrad {
					t.Errorf("gradient sample %+v, want one: %v", obs.Grad, c.wantGrad)
				}
				if c.wantGrad && obs.Grad.Scale != float64(c.world)*8/16 {
					t.Errorf("scale %v, want %v", obs.Grad.Scale, float64(c.world)*8/16)
				}
			}
			if reports != 1 {
				t.Errorf("%d reports, want 1", reports)
			}
		})
	}
}

// TestObserverMeasuresRelaunch: the first report of a new attempt carries
// the relaunch measured from the last step of the attempt left (even one
// the controller no longer counts) to the first of the new one, once.
func TestObserverMeasuresRelaunch(t *testing.T) {
	o := newObserver(16, 1, "local")
	rec := func(attempt int, step int64, at float64) telemetry.StepRecord {
		return telemetry.StepRecord{V: 1, Job: "j", Attempt: attempt, Rank: 0, World: 1, Step: step, Time: at, Seconds: 0.1, Samples: 16, LocalBatch: 16}
	}
	o.attemptStarted(1, plugins.Config{Workers: 1, GlobalBatch: 16})
	var first []float64
	for s := int64(1); s <= 20; s++ {
		if obs, ok := o.add(rec(1, s, float64(s)*0.1)); ok {
			first = append(first, obs.RelaunchS)
		}
	}
	o.note(rec(1, 21, 2.1)) // after the decision to move: the leaving attempt
	o.attemptStarted(2, plugins.Config{Workers: 1, GlobalBatch: 16})
	var second []float64
	for s := int64(22); s <= 50; s++ {
		if obs, ok := o.add(rec(2, s, 5.1+float64(s-22)*0.1)); ok {
			second = append(second, obs.RelaunchS)
		}
	}
	if len(first) == 0 || first[0] != 0 {
		t.Errorf("first attempt reports %v: no relaunch to measure", first)
	}
	if len(second) < 2 || math.Abs(second[0]-3.0) > 1e-9 || second[1] != 0 {
		t.Errorf("second attempt reports %v, want 3 s once", second)
	}
}
