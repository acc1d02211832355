package stepstats

import (
	"encoding/json"
	"math"
	"sort"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
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

// Summarize is the summary of recs (any order, every rank's).
func Summarize(recs []telemetry.StepRecord) Summary {
	var s Summary
	if len(recs) == 0 {
		return s
	}
	rs := append([]telemetry.StepRecord(nil), recs...)
	sort.SliceStable(rs, func(a, b int) bool { return rs[a].Step < rs[b].Step })
	s.Records = len(rs)
	seen := map[[2]int64]int{}
	ranks := map[int]bool{}
	var t tally
	s.FirstStep = rs[0].Step
	for _, r := range rs {
		key := [2]int64{int64(r.Rank), r.Step}
		if seen[key]++; seen[key] > 1 {
			continue // a duplicate counts once
		}
		ranks[r.Rank] = true
		s.FirstStep = min(s.FirstStep, r.Step)
		s.LastStep = max(s.LastStep, r.Step)
		if r.GlobalBatch > 0 {
			s.GlobalBatch = r.GlobalBatch
		}
		t.add(r)
	}
	s.Ranks = len(ranks)
	s.Missing, s.Duplicates = gaps(rs, seen, s.FirstStep, s.LastStep)
	t.fill(&s)
	return s
}

// gaps counts the records missing and duplicated between steps first and
// last: every step should have one record from each rank of the world it
// ran in (a job that moved between worker counts has steps of several
// worlds). seen counts the records of each (rank, step). It works over the
// records, never over the steps in between: a step of 2^63-1 after step 1
// is counted, not walked; the counts saturate at the largest int.
func gaps(recs []telemetry.StepRecord, seen map[[2]int64]int, first, last int64) (missing, duplicates int) {
	worlds := map[int64]int{}
	for _, r := range recs {
		w := r.World
		if r.From == telemetry.FromOutput {
			w = 1 // read off one rank's output: one record a step
		}
		worlds[r.Step] = max(worlds[r.Step], w, 1)
	}
	present := make(map[int64]int, len(worlds)) // the ranks of each step's world seen
	for key, n := range seen {
		rank, step := key[0], key[1]
		if rank < 0 || rank >= int64(worlds[step]) {
			continue
		}
		present[step]++
		duplicates = addSat(duplicates, uint64(n-1))
	}
	// A step with no record at all misses at least rank 0's.
	missing = addSat(0, uint64(last)-uint64(first)-uint64(len(worlds)-1))
	for step, w := range worlds {
		missing = addSat(missing, uint64(w-present[step]))
	}
	return missing, duplicates
}

// addSat is a + b, or the largest int when that is larger.
func addSat(a int, b uint64) int {
	if b > uint64(math.MaxInt-a) {
		return math.MaxInt
	}
	return a + int(b)
}

// summaryM0 is the base batch the summary's samples are taken against:
// B_simple = M0·(tr Σ at M0)/|G|² does not depend on it.
const summaryM0 = 1

// tally adds up the records of a summary, each (rank, step) once, in step
// order.
type tally struct {
	dts                 []float64 // rank 0's step times
	compute, sync       float64
	losses              int
	firstLoss, lastLoss float64
	local, avg          float64
	norms               int
	count               int // Gradients of the last record with norms
	grads               Window
}

func (t *tally) add(r telemetry.StepRecord) {
	if r.Rank == 0 && r.Seconds > 0 {
		t.dts = append(t.dts, r.Seconds)
	}
	if r.ComputeSeconds != nil && r.SyncSeconds != nil {
		t.compute += *r.ComputeSeconds
		t.sync += *r.SyncSeconds
	}
	if r.LocalSqr != nil && r.AvgSqr != nil {
		t.local += *r.LocalSqr
		t.avg += *r.AvgSqr
		t.norms++
		t.count = Gradients(r)
		t.grads.Add(r, summaryM0)
	}
	if r.Rank == 0 && r.Loss != nil {
		if t.losses == 0 {
			t.firstLoss = *r.Loss
		}
		t.lastLoss = *r.Loss
		t.losses++
	}
}

// fill sets the figures of s that the tally gives.
func (t *tally) fill(s *Summary) {
	s.MedianStepS = Median(t.dts)
	if s.MedianStepS > 0 && s.GlobalBatch > 0 {
		s.SamplesPerS = float64(s.GlobalBatch) / s.MedianStepS
	}
	if total := t.compute + t.sync; total > 0 {
		s.ComputeFrac, s.SyncFrac = t.compute/total, t.sync/total
	}
	s.FirstLoss, s.LastLoss = t.firstLoss, t.lastLoss
	if t.norms > 0 {
		s.LocalSqr, s.AvgSqr = t.local/float64(t.norms), t.avg/float64(t.norms)
	}
	if s.AvgSqr > 0 && t.count > 0 {
		s.Noise = s.LocalSqr / s.AvgSqr
		s.NormNoise = s.Noise / float64(t.count)
	}
	// Pooled over the run, the unbiased pair gives |G|² and tr Σ per
	// sample (M0 = 1).
	if g, ok := t.grads.Mean(); ok {
		sqr, vari, err := gns.Unbiased(g)
		if err == nil && sqr > 0 && vari > 0 {
			s.NoiseScale = summaryM0 * vari / sqr
		}
	}
}

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
