package policy

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// TestDrift: a step time that grows with the job's progress in every
// configuration moves the predictions of configurations measured early to
// the job's progress now; scatter without a trend moves nothing.
func TestDrift(t *testing.T) {
	const (
		grow = 0.10 // over the job: a CNN on CPU slowed by about that much
		span = 2300.0
	)
	beta := math.Log(1+grow) / span
	for _, c := range []struct {
		name  string
		noise func(i int) float64 // the i-th report's factor on its step time
		slope float64
		moved bool
	}{
		{"a drift every configuration shares", func(int) float64 { return 1 }, beta, true},
		{"a drift under 1 % scatter", scatter(0.01), beta, true},
		{"2 % scatter without a trend", scatter(0.02), 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := synthSpec(objective.Time, 1e6)
			p, err := New("adaptive", spec)
			if err != nil {
				t.Fatal(err)
			}
			tr := p.(*adaptive).t
			early := predict.Candidate{Type: "fast", Nodes: 1, Workers: 2, Batch: 64}
			now := predict.Candidate{Type: "fast", Nodes: 1, Workers: 2, Batch: 128}
			// The early configuration is measured in 3 reports, then the job
			// runs 20 in the other; each report is 100 steps of progress 1 each.
			progress, i := 0.0, 0
			report := func(cand predict.Candidate, base float64) {
				t.Helper()
				mid := progress + 50
				progress += 100
				st := base * math.Exp(c.slope*mid) * c.noise(i)
				i++
				if err := tr.observe(Observation{ElapsedS: progress, Config: cand, Steps: 100, StepTime: st, Progress: progress}); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				report(early, 0.010)
			}
			for range 20 {
				report(now, 0.017)
			}
			m := tr.meas[early]
			got, _ := tr.stepNow(m)
			if !c.moved {
				if got != m.step {
					t.Errorf("predicted %.5g s for %s, measured %.5g s: want the measurement, with no trend", got, early, m.step)
				}
				return
			}
			want := 0.010 * math.Exp(c.slope*progress)
			if math.Abs(got/want-1) > 0.03 { // its own 3 reports scatter too
				t.Errorf("predicted %.5g s for %s at progress %.0f, measured %.5g s early on: want %.5g s, its time now", got, early, progress, m.step, want)
			}
			ms, err := tr.fit()
			if err != nil {
				t.Fatal(err)
			}
			if st := ms.models["fast"].StepTime(early.Nodes, early.Workers, early.Local()); st != got {
				t.Errorf("the models predict %.5g s for %s, the drift %.5g s", st, early, got)
			}
		})
	}
}

// scatter is a report factor of a fixed pseudo-random log-normal scatter of
// relative size sd.
func scatter(sd float64) func(int) float64 {
	r := rand.New(rand.NewPCG(1, 2))
	xs := make([]float64, 64)
	for i := range xs {
		xs[i] = math.Exp(sd * r.NormFloat64())
	}
	return func(i int) float64 { return xs[i%len(xs)] }
}
