package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"text/tabwriter"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// stepSummary condenses a job's step records into what a person asks first:
// how fast, where the time went, and how noisy the gradients were.
type stepSummary struct {
	Records     int     `json:"records"`
	Ranks       int     `json:"ranks"`
	FirstStep   int64   `json:"first_step"`
	LastStep    int64   `json:"last_step"`
	Missing     int     `json:"missing"`
	Duplicates  int     `json:"duplicates"`
	GlobalBatch int     `json:"global_batch"`
	MedianStepS float64 `json:"median_step_s"`
	SamplesPerS float64 `json:"samples_per_s"`
	ComputeFrac float64 `json:"compute_fraction,omitempty"`
	SyncFrac    float64 `json:"sync_fraction,omitempty"`
	FirstLoss   float64 `json:"first_loss,omitempty"`
	LastLoss    float64 `json:"last_loss,omitempty"`
	// LocalSqr and AvgSqr are the mean squared gradient norms before and after all-reduce.
	LocalSqr float64 `json:"mean_local_sqr,omitempty"`
	AvgSqr   float64 `json:"mean_avg_sqr,omitempty"`
	// Noise is Scavenger's γ (mean local / averaged squared norm) and NormNoise γ/K.
	Noise     float64 `json:"noise,omitempty"`
	NormNoise float64 `json:"normalized_noise,omitempty"`
	// NoiseScale is the gradient noise scale B_simple = tr Σ/|G|² in samples,
	// from the pooled norms (0 when they cannot give one).
	NoiseScale float64 `json:"noise_scale,omitempty"`
}

// summarize computes the summary of recs (any order).
func summarize(recs []telemetry.StepRecord) stepSummary {
	var s stepSummary
	if len(recs) == 0 {
		return s
	}
	s.Records = len(recs)
	seen := map[[2]int64]int{}
	ranks := map[int]bool{}
	var dts []float64
	var compute, sync, local, avg float64
	var nTimed, nNorm int
	world, localBatch := 0, 0
	type lossAt struct {
		step int64
		loss float64
	}
	var losses []lossAt
	s.FirstStep = recs[0].Step
	for _, r := range recs {
		key := [2]int64{int64(r.Rank), r.Step}
		if seen[key]++; seen[key] > 1 {
			continue // a duplicate counts once
		}
		ranks[r.Rank] = true
		s.FirstStep = min(s.FirstStep, r.Step)
		s.LastStep = max(s.LastStep, r.Step)
		world = r.World
		if r.GlobalBatch > 0 {
			s.GlobalBatch = r.GlobalBatch
		}
		if r.LocalBatch > 0 {
			localBatch = r.LocalBatch
		}
		if r.Rank == 0 && r.Seconds > 0 {
			dts = append(dts, r.Seconds)
		}
		if r.ComputeSeconds != nil && r.SyncSeconds != nil {
			compute += *r.ComputeSeconds
			sync += *r.SyncSeconds
			nTimed++
		}
		if r.LocalSqr != nil && r.AvgSqr != nil {
			local += *r.LocalSqr
			avg += *r.AvgSqr
			nNorm++
		}
		if r.Rank == 0 && r.Loss != nil {
			losses = append(losses, lossAt{r.Step, *r.Loss})
		}
	}
	s.Ranks = len(ranks)
	// Every step should have one record from each rank of the world it ran in
	// (a job that moved between worker counts has steps of several worlds).
	worlds := map[int64]int{}
	for _, r := range recs {
		worlds[r.Step] = max(worlds[r.Step], r.World)
	}
	for step := s.FirstStep; step <= s.LastStep; step++ {
		w := worlds[step]
		if w == 0 {
			w = 1 // no record of this step at all: at least rank 0's is missing
		}
		for rank := 0; rank < w; rank++ {
			switch n := seen[[2]int64{int64(rank), step}]; {
			case n == 0:
				s.Missing++
			case n > 1:
				s.Duplicates += n - 1
			}
		}
	}
	s.MedianStepS = median(dts)
	if s.MedianStepS > 0 && s.GlobalBatch > 0 {
		s.SamplesPerS = float64(s.GlobalBatch) / s.MedianStepS
	}
	if total := compute + sync; total > 0 {
		s.ComputeFrac, s.SyncFrac = compute/total, sync/total
	}
	if len(losses) > 0 {
		sort.Slice(losses, func(a, b int) bool { return losses[a].step < losses[b].step })
		s.FirstLoss, s.LastLoss = losses[0].loss, losses[len(losses)-1].loss
	}
	if nNorm > 0 {
		s.LocalSqr, s.AvgSqr = local/float64(nNorm), avg/float64(nNorm)
	}
	if s.AvgSqr > 0 && world > 0 {
		s.Noise = s.LocalSqr / s.AvgSqr
		s.NormNoise = s.Noise / float64(world)
	}
	// Pooled over the run, the unbiased pair (count = K workers, each local
	// gradient over the worker's whole step batch, accumulated micro-batches
	// included) gives |G|² and tr Σ at the local batch b; b·trΣ_b/|G|² is
	// B_simple in samples.
	if world > 1 && localBatch > 0 && nNorm > 0 {
		sqr, vari, err := gns.Unbiased(gns.Sample{LocalSqr: s.LocalSqr, TotalSqr: s.AvgSqr, Count: float64(world), Scale: float64(world)})
		if err == nil && sqr > 0 && vari > 0 {
			s.NoiseScale = float64(localBatch) * vari / sqr
		}
	}
	return s
}

func (s stepSummary) print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) {
		fmt.Fprintf(tw, "%s:\t"+format+"\n", append([]any{k}, args...)...)
	}
	row("Step records", "%d from %d rank(s), steps %d..%d, %d missing, %d duplicated", s.Records, s.Ranks, s.FirstStep, s.LastStep, s.Missing, s.Duplicates)
	row("Median step", "%.2f ms", s.MedianStepS*1e3)
	if s.SamplesPerS > 0 {
		row("Throughput", "%.0f samples/s at global batch %d", s.SamplesPerS, s.GlobalBatch)
	}
	if s.ComputeFrac > 0 || s.SyncFrac > 0 {
		row("Time split", "%.0f%% compute, %.0f%% all-reduce", 100*s.ComputeFrac, 100*s.SyncFrac)
	}
	if s.FirstLoss != 0 || s.LastLoss != 0 {
		row("Loss", "%.4f -> %.4f", s.FirstLoss, s.LastLoss)
	}
	if s.AvgSqr > 0 {
		row("Gradient norms", "local %.4g, averaged %.4g (squared, mean per step)", s.LocalSqr, s.AvgSqr)
		row("Noise", "γ = %.3f, γ/K = %.3f", s.Noise, s.NormNoise)
	}
	if s.NoiseScale > 0 && !math.IsInf(s.NoiseScale, 0) {
		row("Noise scale", "B_simple ≈ %.0f samples", s.NoiseScale)
	}
	return tw.Flush()
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
