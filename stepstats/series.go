package stepstats

import (
	"math"
	"sort"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// This file holds the series a report draws over a job's time from rank
// 0's step records: samples per second and loss, attempt by attempt.

// RateSeries is the samples per second along rank 0's steps in recs (any
// order; a step recorded twice counts once), attempt by attempt: each point
// is the samples of a group of consecutive steps of one attempt over the
// time from the end of the step before the group to the end of its last
// step, at the group's last step, in seconds since t0 (Unix seconds). The
// groups are ceil(steps/n) steps long, so that there are about n points in
// all (one more per attempt at most); an attempt's first step only starts
// the clock. A step's samples are its global batch, or its worker's samples
// times the world.
func RateSeries(recs []telemetry.StepRecord, t0 float64, n int) []Point {
	return stepGroups(recs, t0, n, func(group []*telemetry.StepRecord, dt float64) float64 {
		samples := 0
		for _, r := range group {
			samples += stepSamples(*r)
		}
		return float64(samples) / dt
	})
}

// StepTimeSeries is the mean step time along rank 0's steps in recs, in
// the groups of RateSeries: each point is the time from the end of the
// step before the group to the end of its last step over its steps.
func StepTimeSeries(recs []telemetry.StepRecord, t0 float64, n int) []Point {
	return stepGroups(recs, t0, n, func(group []*telemetry.StepRecord, dt float64) float64 {
		return dt / float64(len(group))
	})
}

// stepGroups is the series of RateSeries' groups of steps, each point
// valued by value of the group and its time dt (> 0).
func stepGroups(recs []telemetry.StepRecord, t0 float64, n int, value func(group []*telemetry.StepRecord, dt float64) float64) []Point {
	if n <= 0 {
		return nil
	}
	attempts := rank0ByAttempt(recs)
	g := groupSize(attempts, n)
	var out []Point
	for _, rs := range attempts {
		for i := 1; i < len(rs); i += g {
			j := min(i+g, len(rs)) // the group is rs[i:j]
			if dt := rs[j-1].Time - rs[i-1].Time; dt > 0 {
				out = append(out, Point{T: rs[j-1].Time - t0, V: value(rs[i:j], dt), Attempt: rs[j-1].Attempt})
			}
		}
	}
	return out
}

// LossSeries is rank 0's training loss along its steps in recs (any order;
// a step recorded twice counts once; steps without a loss, or with a NaN or
// infinite one, which no plot can draw, are skipped),
// attempt by attempt: each point is the mean time (seconds since t0, Unix
// seconds) and mean loss of a group of consecutive steps of one attempt,
// ceil(steps/n) steps long, so that there are about n points in all (one
// more per attempt at most).
func LossSeries(recs []telemetry.StepRecord, t0 float64, n int) []Point {
	if n <= 0 {
		return nil
	}
	var attempts [][]*telemetry.StepRecord
	for _, rs := range rank0ByAttempt(recs) {
		var with []*telemetry.StepRecord
		for _, r := range rs {
			if r.Loss != nil && !math.IsNaN(*r.Loss) && !math.IsInf(*r.Loss, 0) {
				with = append(with, r)
			}
		}
		if len(with) > 0 {
			attempts = append(attempts, with)
		}
	}
	g := groupSize(attempts, n)
	var out []Point
	for _, rs := range attempts {
		for i := 0; i < len(rs); i += g {
			group := rs[i:min(i+g, len(rs))]
			var t, v float64
			for _, r := range group {
				t += r.Time
				v += *r.Loss
			}
			k := float64(len(group))
			out = append(out, Point{T: t/k - t0, V: v / k, Attempt: group[0].Attempt})
		}
	}
	return out
}

// rank0ByAttempt is rank 0's records in recs, one per attempt and step
// (the first given), in order of time, split where the attempt changes. It
// points into recs rather than copying them: a report of a long job takes
// these series several times.
func rank0ByAttempt(recs []telemetry.StepRecord) [][]*telemetry.StepRecord {
	var rs []*telemetry.StepRecord
	for i := range recs {
		if recs[i].Rank == 0 {
			rs = append(rs, &recs[i])
		}
	}
	// Each attempt's step once: the first of equal ones in recs' order.
	sort.SliceStable(rs, func(a, b int) bool {
		if rs[a].Attempt != rs[b].Attempt {
			return rs[a].Attempt < rs[b].Attempt
		}
		return rs[a].Step < rs[b].Step
	})
	uniq := rs[:0]
	for i, r := range rs {
		if i == 0 || r.Attempt != rs[i-1].Attempt || r.Step != rs[i-1].Step {
			uniq = append(uniq, r)
		}
	}
	rs = uniq
	sort.SliceStable(rs, func(a, b int) bool {
		if rs[a].Time != rs[b].Time {
			return rs[a].Time < rs[b].Time
		}
		return rs[a].Step < rs[b].Step
	})
	var out [][]*telemetry.StepRecord
	for i, r := range rs {
		if i == 0 || r.Attempt != rs[i-1].Attempt {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], r)
	}
	return out
}

// groupSize is how many steps a point of a series of about n points over
// attempts stands for (at least 1).
func groupSize(attempts [][]*telemetry.StepRecord, n int) int {
	total := 0
	for _, rs := range attempts {
		total += len(rs)
	}
	return max(1, (total+n-1)/n)
}

// stepSamples is the samples of a step, as Rate counts them: its global
// batch, or its worker's samples times the world.
func stepSamples(r telemetry.StepRecord) int {
	if r.GlobalBatch != 0 {
		return r.GlobalBatch
	}
	return r.Samples * r.World
}
