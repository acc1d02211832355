package main

import (
	"math"
	"testing"

	"github.com/scavenger-ml/scavenger/telemetry"
)

func f64(v float64) *float64 { return &v }

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
	s := summarize(recs)
	want := stepSummary{
		Records: 8, Ranks: 2, FirstStep: 1, LastStep: 4, Missing: 1, Duplicates: 1, GlobalBatch: 64,
		MedianStepS: 0.25, SamplesPerS: 256, ComputeFrac: 0.75, SyncFrac: 0.25, FirstLoss: 2.5, LastLoss: 1,
		LocalSqr: 3, AvgSqr: 2, Noise: 1.5, NormNoise: 0.75, NoiseScale: 64,
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if s.Records != want.Records || s.Ranks != want.Ranks || s.FirstStep != want.FirstStep || s.LastStep != want.LastStep ||
		s.Missing != want.Missing || s.Duplicates != want.Duplicates || s.GlobalBatch != want.GlobalBatch ||
		!near(s.MedianStepS, want.MedianStepS) || !near(s.SamplesPerS, want.SamplesPerS) || !near(s.ComputeFrac, want.ComputeFrac) ||
		!near(s.SyncFrac, want.SyncFrac) || !near(s.FirstLoss, want.FirstLoss) || !near(s.LastLoss, want.LastLoss) ||
		!near(s.Noise, want.Noise) || !near(s.NormNoise, want.NormNoise) || !near(s.NoiseScale, want.NoiseScale) {
		t.Fatalf("summarize =\n%+v\nwant\n%+v", s, want)
	}
	if z := summarize(nil); z.Records != 0 || z.NoiseScale != 0 {
		t.Fatalf("summarize(nil) = %+v", z)
	}
}
