package stepstats

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// Aggregate is what a job's step records add up to, kept as they come in
// a few kilobytes whatever their number, for every reader that would
// otherwise replay them all: the summary of `scavctl steps --summary`
// (Summary), each attempt's measured step time for `scavctl report`
// (AttemptStepS) and what `scavctl top` shows (Live). Summarize is an
// Aggregate of the records it is given, so an Aggregate kept record by
// record (daemon/aggregates) and one made from a replay of the same
// records in the same order are equal.
//
// Each (rank, step) counts once, the first record of it to come; a later
// one is a duplicate. The figures of a summary that depend on an order
// take the steps' order (the first and last loss, the gradients of the
// newest step), so the order records come in changes none of them; the
// sums it adds up in the order they come. Medians are a Hist's.
//
// The zero value is empty (no base batch: no noise scale for Live). Its
// fields are its JSON form.
type Aggregate struct {
	Records  int `json:"records"`
	Distinct int `json:"distinct"`
	// Seen holds, per rank, the steps recorded; Worlds each step's world.
	Seen   []RankSteps `json:"seen,omitempty"`
	Worlds Spans       `json:"worlds,omitempty"`
	First  int64       `json:"first"`
	Last   int64       `json:"last"`
	// GlobalBatch is that of the newest step that had one (GlobalStep).
	GlobalBatch int   `json:"global_batch,omitempty"`
	GlobalStep  int64 `json:"global_step,omitempty"`
	// StepTimes are rank 0's step times.
	StepTimes Hist    `json:"step_times"`
	Compute   float64 `json:"compute,omitempty"`
	Sync      float64 `json:"sync,omitempty"`
	// FirstLoss and LastLoss are rank 0's at its first and newest step that had one.
	FirstLoss     Num   `json:"first_loss,omitempty"`
	LastLoss      Num   `json:"last_loss,omitempty"`
	FirstLossStep int64 `json:"first_loss_step,omitempty"`
	LastLossStep  int64 `json:"last_loss_step,omitempty"`
	Losses        int   `json:"losses,omitempty"`
	// Local and Avg add up the squared gradient norms of Norms records;
	// Count is Gradients of the newest step's (CountStep).
	Local     float64 `json:"local,omitempty"`
	Avg       float64 `json:"avg,omitempty"`
	Norms     int     `json:"norms,omitempty"`
	Count     int     `json:"count,omitempty"`
	CountStep int64   `json:"count_step,omitempty"`
	// Pools pools the gradient-noise samples, replicas' ([0]) and the
	// difference estimator's ([1]), for the noise scale over the run.
	Pools [2]Pool `json:"pools"`
	// Attempts measure each attempt's step time (AttemptStepS).
	Attempts []AttemptSteps `json:"attempts,omitempty"`
	// Live is what top shows.
	Live Live `json:"live"`
}

// RankSteps are the steps a rank recorded; Swallowed counts the steps its
// list took in without records when it grew past its bound (Spans.Add).
type RankSteps struct {
	Rank      int   `json:"rank"`
	Steps     Spans `json:"steps"`
	Swallowed int64 `json:"swallowed,omitempty"`
}

// Pool adds up gradient-noise samples (Sample) against summaryM0; Count and
// Scale are those of the newest step's sample (Step).
type Pool struct {
	Local float64 `json:"local,omitempty"`
	Total float64 `json:"total,omitempty"`
	N     int     `json:"n,omitempty"`
	Count float64 `json:"count,omitempty"`
	Scale float64 `json:"scale,omitempty"`
	Step  int64   `json:"step,omitempty"`
}

// AttemptSteps measures an attempt's step time: rank 0's step records
// after the first AttemptWarmup of them, every record as it comes (a
// report's figure, which counts a repeated step again).
type AttemptSteps struct {
	Attempt int  `json:"attempt"`
	Seen    int  `json:"seen"`
	Times   Hist `json:"times"`
}

// AttemptWarmup is the number of an attempt's first steps its measured step
// time leaves out, as the controller does.
const AttemptWarmup = 3

// NewAggregate is an empty Aggregate whose Live takes the noise scale
// against base batch m0 (the job's first global batch).
func NewAggregate(m0 float64) Aggregate { return Aggregate{Live: NewLive(m0)} }

// Add takes one record; records that are not steps are left out.
func (a *Aggregate) Add(r telemetry.StepRecord) {
	if !r.IsStep() {
		return
	}
	a.Records++
	a.attempt(r)
	a.Live.Add(r)
	rs := a.rank(r.Rank)
	added, swallowed := rs.Steps.Add(r.Step)
	rs.Swallowed += swallowed
	if !added {
		return // a duplicate counts once
	}
	if a.Distinct == 0 {
		a.First, a.Last = r.Step, r.Step
	}
	a.Distinct++
	a.First, a.Last = min(a.First, r.Step), max(a.Last, r.Step)
	w := r.World
	if r.From == telemetry.FromOutput {
		w = 1 // read off one rank's output: one record a step
	}
	a.Worlds.Raise(r.Step, max(w, 1))
	if r.GlobalBatch > 0 && r.Step >= a.GlobalStep {
		a.GlobalBatch, a.GlobalStep = r.GlobalBatch, r.Step
	}
	if r.Rank == 0 {
		a.StepTimes.Add(r.Seconds)
	}
	if r.ComputeSeconds != nil && r.SyncSeconds != nil && finite(*r.ComputeSeconds) && finite(*r.SyncSeconds) {
		a.Compute += *r.ComputeSeconds
		a.Sync += *r.SyncSeconds
	}
	if r.LocalSqr != nil && r.AvgSqr != nil && finite(*r.LocalSqr) && finite(*r.AvgSqr) {
		a.Local += *r.LocalSqr
		a.Avg += *r.AvgSqr
		a.Norms++
		if r.Step >= a.CountStep {
			a.Count, a.CountStep = Gradients(r), r.Step
		}
		if s, ok := Sample(r, summaryM0); ok {
			a.Pools[boolIndex(s.Biased)].add(s, r.Step)
		}
	}
	if r.Rank == 0 && r.Loss != nil {
		if a.Losses == 0 || r.Step < a.FirstLossStep {
			a.FirstLoss, a.FirstLossStep = Num(*r.Loss), r.Step
		}
		if a.Losses == 0 || r.Step > a.LastLossStep {
			a.LastLoss, a.LastLossStep = Num(*r.Loss), r.Step
		}
		a.Losses++
	}
}

// rank is rank's steps, added when new.
func (a *Aggregate) rank(rank int) *RankSteps {
	for i := range a.Seen {
		if a.Seen[i].Rank == rank {
			return &a.Seen[i]
		}
	}
	a.Seen = append(a.Seen, RankSteps{Rank: rank})
	return &a.Seen[len(a.Seen)-1]
}

// attempt measures rank 0's step times of r's attempt.
func (a *Aggregate) attempt(r telemetry.StepRecord) {
	if r.Rank != 0 || !(r.Seconds > 0) {
		return
	}
	var at *AttemptSteps
	for i := range a.Attempts {
		if a.Attempts[i].Attempt == r.Attempt {
			at = &a.Attempts[i]
		}
	}
	if at == nil {
		a.Attempts = append(a.Attempts, AttemptSteps{Attempt: r.Attempt})
		at = &a.Attempts[len(a.Attempts)-1]
	}
	if at.Seen++; at.Seen > AttemptWarmup {
		at.Times.Add(r.Seconds)
	}
}

// AttemptStepS is the median step time of each attempt that measured one.
func (a *Aggregate) AttemptStepS() map[int]float64 {
	out := make(map[int]float64, len(a.Attempts))
	for i := range a.Attempts {
		if m := a.Attempts[i].Times.Median(); m > 0 {
			out[a.Attempts[i].Attempt] = m
		}
	}
	return out
}

// add pools sample s of step.
func (p *Pool) add(s gns.Sample, step int64) {
	p.Local += s.LocalSqr
	p.Total += s.TotalSqr
	p.N++
	if step >= p.Step {
		p.Count, p.Scale, p.Step = s.Count, s.Scale, step
	}
}

// mean is the pool's mean sample, of the kind biased says.
func (p *Pool) mean(biased bool) (gns.Sample, bool) {
	if p.N == 0 {
		return gns.Sample{}, false
	}
	n := float64(p.N)
	return gns.Sample{LocalSqr: p.Local / n, TotalSqr: p.Total / n, Count: p.Count, Scale: p.Scale, Biased: biased}, true
}

// Summary is the summary of the records added. Replicas' samples supersede
// the difference estimator's for the noise scale: those of the difference
// estimator count only when there are none of the replicas'.
func (a *Aggregate) Summary() Summary {
	var s Summary
	if a.Records == 0 {
		return s
	}
	s.Records, s.Ranks, s.FirstStep, s.LastStep = a.Records, len(a.Seen), a.First, a.Last
	s.GlobalBatch, s.Duplicates = a.GlobalBatch, a.Records-a.Distinct
	expected := a.Worlds.Weighted(a.First, a.Last)
	for _, rs := range a.Seen {
		expected = satAdd(expected, rs.Swallowed)
	}
	s.Missing = int(max(0, expected-int64(a.Distinct)))
	s.MedianStepS = a.StepTimes.Median()
	if s.MedianStepS > 0 && s.GlobalBatch > 0 {
		s.SamplesPerS = float64(s.GlobalBatch) / s.MedianStepS
	}
	if total := a.Compute + a.Sync; total > 0 {
		s.ComputeFrac, s.SyncFrac = a.Compute/total, a.Sync/total
	}
	s.FirstLoss, s.LastLoss = float64(a.FirstLoss), float64(a.LastLoss)
	if a.Norms > 0 {
		s.LocalSqr, s.AvgSqr = a.Local/float64(a.Norms), a.Avg/float64(a.Norms)
	}
	if s.AvgSqr > 0 && a.Count > 0 {
		s.Noise = s.LocalSqr / s.AvgSqr
		s.NormNoise = s.Noise / float64(a.Count)
	}
	// Pooled over the run, the unbiased pair gives |G|² and tr Σ per
	// sample (M0 = 1).
	g, ok := a.Pools[0].mean(false)
	if !ok {
		g, ok = a.Pools[1].mean(true)
	}
	if ok {
		sqr, vari, err := gns.Unbiased(g)
		if err == nil && sqr > 0 && vari > 0 {
			s.NoiseScale = summaryM0 * vari / sqr
		}
	}
	return s
}

// finite reports whether v is a number other than ±Inf.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Num is a float64 whose JSON form holds NaN and ±Inf too (as the strings
// the wire spells them, "NaN", "Infinity", "-Infinity"): a loss that went
// NaN is recorded as such.
type Num float64

// MarshalJSON implements json.Marshaler.
func (n Num) MarshalJSON() ([]byte, error) {
	return telemetry.Loss(n).MarshalJSON() // the wire's spelling: "NaN", "Infinity", "-Infinity"
}

// UnmarshalJSON implements json.Unmarshaler.
func (n *Num) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		v, err := strconv.ParseFloat(s, 64)
		*n = Num(v)
		return err
	}
	var v float64
	err := json.Unmarshal(b, &v)
	*n = Num(v)
	return err
}
