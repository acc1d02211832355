package main

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/scavenger-ml/scavenger/stepstats"
)

// printSummary writes the summary of a job's steps (`scavctl logs --summary`).
func printSummary(w io.Writer, s stepstats.Summary) error {
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
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("print step summary: %w", err)
	}
	return nil
}
