package stepstats

import (
	"encoding/json"
	"sort"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// Summary condenses a job's step records into what a person asks first:
// how fast, where the time went, and how noisy the gradients were.
type Summary struct {
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
	// LocalSqr and AvgSqr are the mean squared gradient norms before and
	// after all-reduce, over every record that has them.
	LocalSqr float64 `json:"mean_local_sqr,omitempty"`
	AvgSqr   float64 `json:"mean_avg_sqr,omitempty"`
	// Noise is Scavenger's γ (mean local / averaged squared norm) and
	// NormNoise γ/K, with K the gradients averaged (Gradients: the workers,
	// or the record's Count).
	Noise     float64 `json:"noise,omitempty"`
	NormNoise float64 `json:"normalized_noise,omitempty"`
	// NoiseScale is the gradient noise scale B_simple = tr Σ/|G|² in
	// samples, from the samples (Sample) of every record pooled in a Window:
	// those of the replicas when the job had both (0 when they cannot give
	// one).
	NoiseScale float64 `json:"noise_scale,omitempty"`
}

// MarshalJSON encodes the summary; a NaN or infinite loss (a run that
// diverged) is written as the wire writes it (telemetry.Loss).
func (s Summary) MarshalJSON() ([]byte, error) {
	type fields Summary
	return json.Marshal(struct {
		fields
		FirstLoss telemetry.Loss `json:"first_loss,omitempty"`
		LastLoss  telemetry.Loss `json:"last_loss,omitempty"`
	}{fields(s), telemetry.Loss(s.FirstLoss), telemetry.Loss(s.LastLoss)})
}

// Summarize is the summary of recs (any order, every rank's): an
// Aggregate of them, in the order given.
func Summarize(recs []telemetry.StepRecord) Summary {
	var a Aggregate
	for _, r := range recs {
		a.Add(r)
	}
	return a.Summary()
}

// summaryM0 is the base batch the summary's samples are taken against:
// B_simple = M0·(tr Σ at M0)/|G|² does not depend on it.
const summaryM0 = 1

// Median is the median of v (0 when it is empty); v is left as it is.
func Median(v []float64) float64 {
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
