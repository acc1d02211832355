package stepstats

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/telemetry"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestSummarize(t *testing.T) {
	// |G|² = 1 and tr Σ = 64 per sample: a worker's gradient over b = 32
	// samples has E|g|² = 1 + 64/32 = 3, the average over K = 2 workers
	// 1 + 64/64 = 2; so γ = 1.5, γ/K = 0.75 and B_simple = 64.
	var recs []telemetry.StepRecord
	for step := int64(1); step <= 4; step++ {
		for rank := 0; rank < 2; rank++ {
			if step == 3 && rank == 1 {
				continue // a missing record
			}
			recs = append(recs, telemetry.StepRecord{
				V: 1, Job: "j", Attempt: 1, Rank: rank, World: 2, Step: step, Time: float64(step), Seconds: 0.1 * float64(step),
				LocalBatch: 32, GlobalBatch: 64, ComputeSeconds: f64(0.075), SyncSeconds: f64(0.025),
				Loss: f64(3 - float64(step)/2), LocalSqr: f64(3), AvgSqr: f64(2),
			})
		}
	}
	recs = append(recs, recs[0]) // a duplicate
	s := Summarize(recs)
	want := Summary{
		Records: 8, Ranks: 2, FirstStep: 1, LastStep: 4, Missing: 1, Duplicates: 1, GlobalBatch: 64,
		MedianStepS: 0.25, SamplesPerS: 256, ComputeFrac: 0.75, SyncFrac: 0.25, FirstLoss: 2.5, LastLoss: 1,
		LocalSqr: 3, AvgSqr: 2, Noise: 1.5, NormNoise: 0.75, NoiseScale: 64,
	}
	if s.Records != want.Records || s.Ranks != want.Ranks || s.FirstStep != want.FirstStep || s.LastStep != want.LastStep ||
		s.Missing != want.Missing || s.Duplicates != want.Duplicates || s.GlobalBatch != want.GlobalBatch ||
		!near(s.MedianStepS, want.MedianStepS) || !near(s.SamplesPerS, want.SamplesPerS) || !near(s.ComputeFrac, want.ComputeFrac) ||
		!near(s.SyncFrac, want.SyncFrac) || !near(s.FirstLoss, want.FirstLoss) || !near(s.LastLoss, want.LastLoss) ||
		!near(s.Noise, want.Noise) || !near(s.NormNoise, want.NormNoise) || !near(s.NoiseScale, want.NoiseScale) {
		t.Fatalf("Summarize =\n%+v\nwant\n%+v", s, want)
	}
	if z := Summarize(nil); z.Records != 0 || z.NoiseScale != 0 {
		t.Fatalf("Summarize(nil) = %+v", z)
	}
}

// TestSummarizeNoise pins the summary's noise for records that give their
// Count or come from the difference estimator: the same Sample as the
// controller's and top's.
func TestSummarizeNoise(t *testing.T) {
	steps := func(world, count, local int, biased bool, localSqr, avgSqr float64, from, to int64) []telemetry.StepRecord {
		var out []telemetry.StepRecord
		for s := from; s <= to; s++ {
			for rank := 0; rank < world; rank++ {
				out = append(out, telemetry.StepRecord{Job: "j", Rank: rank, World: world, Step: s, Count: count, Biased: biased,
					LocalBatch: local, GlobalBatch: world * local, LocalSqr: f64(localSqr), AvgSqr: f64(avgSqr)})
			}
		}
		return out
	}
	for _, c := range []struct {
		name                         string
		recs                         []telemetry.StepRecord
		noise, normNoise, noiseScale float64
	}{
		// Count 8 gradients of LocalBatch 32 samples each: |G|² = (8·2−3)/7
		// = 13/7, tr Σ per sample (3−2)·8·32/7, B_simple = 256/13; γ/K
		// over the 8 gradients.
		{"Count", steps(2, 8, 32, false, 3, 2, 1, 4), 1.5, 1.5 / 8, 256.0 / 13},
		// One worker, two consecutive gradients of 32: |G|² = 1, tr Σ =
		// (3−2)·64, B_simple = 64; γ/K over the 2 gradients.
		{"world 1, difference estimator", steps(1, 2, 32, true, 3, 2, 1, 4), 1.5, 0.75, 64},
		// A world of one without Count has one gradient: no noise scale.
		{"world 1 without Count", steps(1, 0, 32, false, 3, 3, 1, 4), 1, 1, 0},
		// Replicas supersede the difference estimator: B_simple from the
		// two workers' steps alone (local 5, avg 3: |G|² = 1, tr Σ = 2·64),
		// while the mean norms are over every record (local 32/8, avg 20/8).
		{"difference estimator then replicas", append(steps(1, 2, 32, true, 3, 2, 1, 4), steps(2, 0, 32, false, 5, 3, 5, 6)...), 1.6, 0.8, 128},
		{"no LocalBatch: norms but no noise scale", steps(2, 0, 0, false, 3, 2, 1, 4), 1.5, 0.75, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Summarize(c.recs)
			if !near(s.Noise, c.noise) || !near(s.NormNoise, c.normNoise) || !near(s.NoiseScale, c.noiseScale) {
				t.Errorf("noise %v, γ/K %v, B_simple %v; want %v, %v, %v", s.Noise, s.NormNoise, s.NoiseScale, c.noise, c.normNoise, c.noiseScale)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	v := []float64{3, 1, 2, 10}
	if m := Median(v); m != 2.5 || v[0] != 3 {
		t.Errorf("Median = %v (input %v)", m, v)
	}
	if Median(nil) != 0 || Median([]float64{4}) != 4 {
		t.Error("Median of none or one")
	}
}

// TestSummarizeStepsReadOffOutput: steps read off one rank's output of a
// two-worker job have one record each, and none is missing.
func TestSummarizeStepsReadOffOutput(t *testing.T) {
	var recs []telemetry.StepRecord
	for step := int64(1); step <= 40; step++ {
		recs = append(recs, telemetry.StepRecord{V: 1, Job: "j", Attempt: 1, World: 2, Step: step, Seconds: 0.1, From: telemetry.FromOutput})
	}
	if s := Summarize(recs); s.Missing != 0 || s.FirstStep != 1 || s.LastStep != 40 {
		t.Errorf("summary %+v: want steps 1..40, none missing", s)
	}
}

// TestSummarizeExtremeSteps: records at the ends of the step range, and a
// rank of a world of a million, are summarised at once (issue 21: step
// 2^63-1 made gaps loop over every step in between), with the gaps counted.
func TestSummarizeExtremeSteps(t *testing.T) {
	rec := func(rank, world int, step int64) telemetry.StepRecord {
		return telemetry.StepRecord{V: 1, Job: "j", Attempt: 1, Rank: rank, World: world, Step: step, Time: 1, Seconds: 0.1}
	}
	for _, c := range []struct {
		name                string
		recs                []telemetry.StepRecord
		missing, duplicates int
	}{
		{"step 2^63-1 after step 1", []telemetry.StepRecord{rec(0, 1, 1), rec(0, 1, math.MaxInt64)}, math.MaxInt64 - 2, 0},
		{"the whole int64 range", []telemetry.StepRecord{rec(0, 1, math.MinInt64), rec(0, 1, math.MaxInt64)}, math.MaxInt - 2, 0}, // the expected count saturates, less the records seen
		{"rank 999999 of a world of a million", []telemetry.StepRecord{rec(999999, 1000000, 1), rec(0, 1, 2), rec(0, 1, 2)}, 999999, 1},
		{"worlds of 2^62 on many steps", []telemetry.StepRecord{rec(0, 1<<62, 1), rec(0, 1<<62, 2), rec(0, 1<<62, 3)}, math.MaxInt - 3, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan Summary, 1)
			go func() { done <- Summarize(c.recs) }()
			select {
			case s := <-done:
				if s.Missing != c.missing || s.Duplicates != c.duplicates {
					t.Errorf("missing %d, duplicates %d; want %d, %d", s.Missing, s.Duplicates, c.missing, c.duplicates)
				}
			case <-time.After(20 * time.Second): // it takes microseconds; a loop over the steps takes centuries
				t.Fatal("Summarize did not return")
			}
		})
	}
}

// TestSummarizeNaNLoss: a run whose loss turned NaN says so in its summary,
// in print and in JSON, and its loss series leaves the NaN out.
func TestSummarizeNaNLoss(t *testing.T) {
	var recs []telemetry.StepRecord
	for step := int64(1); step <= 4; step++ {
		loss := 1 / float64(step)
		if step > 2 {
			loss = math.NaN()
		}
		recs = append(recs, telemetry.StepRecord{V: 1, Job: "j", Attempt: 1, World: 1, Step: step, Time: float64(step), Loss: &loss})
	}
	s := Summarize(recs)
	if s.FirstLoss != 1 || !math.IsNaN(s.LastLoss) {
		t.Fatalf("losses %v -> %v, want 1 -> NaN", s.FirstLoss, s.LastLoss)
	}
	b, err := json.Marshal(s)
	if err != nil || !strings.Contains(string(b), `"last_loss":"NaN"`) || !strings.Contains(string(b), `"first_loss":1`) {
		t.Fatalf("summary JSON %s, %v", b, err)
	}
	if pts := LossSeries(recs, 0, 10); len(pts) != 2 {
		t.Fatalf("loss series %v, want the two finite losses", pts)
	}
}
