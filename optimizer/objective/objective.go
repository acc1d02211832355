// Package objective chooses among predicted candidates: least time, least
// cost, the knee of the time–cost Pareto front (Kneedle, Satopää et al.
// 2011), least cost under a deadline, least time under a budget, within
// bounds on workers, global batch and local batch. All functions are pure.
package objective

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// Kind is what the user optimises.
type Kind string

// The objective kinds.
const (
	Time Kind = "time"
	Cost Kind = "cost"
	Knee Kind = "knee"
)

// ParseKind validates an objective name.
func ParseKind(s string) (Kind, error) {
	switch k := Kind(s); k {
	case Time, Cost, Knee:
		return k, nil
	}
	return "", fmt.Errorf("parse objective %q: %w", s, ErrUnknownKind)
}

// Bounds restricts candidates; zero fields are unbounded.
type Bounds struct {
	MinWorkers, MaxWorkers int
	MinBatch, MaxBatch     int
	MinLocal, MaxLocal     float64
}

// Allows reports whether c is within the bounds.
func (b Bounds) Allows(c predict.Candidate) bool {
	l := c.Local()
	return (b.MinWorkers == 0 || c.Workers >= b.MinWorkers) && (b.MaxWorkers == 0 || c.Workers <= b.MaxWorkers) &&
		(b.MinBatch == 0 || c.Batch >= b.MinBatch) && (b.MaxBatch == 0 || c.Batch <= b.MaxBatch) &&
		(b.MinLocal == 0 || l >= b.MinLocal) && (b.MaxLocal == 0 || l <= b.MaxLocal)
}

// Objective is the user's goal. DeadlineS and BudgetUSD (0 = none) limit the
// predicted totals (remaining + switch) the caller passes, so a caller with a
// whole-job deadline subtracts what has been spent.
type Objective struct {
	Kind      Kind
	DeadlineS float64
	BudgetUSD float64
	Bounds    Bounds
}

// Choice is the selected candidate and why.
type Choice struct {
	Index  int
	Reason string
}

// Choose returns the index in preds of the best candidate for o. Candidates
// outside the bounds are ignored. With a deadline (budget) the choice is
// among candidates that meet it; when none does, the fastest (cheapest) is
// chosen and the reason says so.
func Choose(preds []predict.Prediction, o Objective) (Choice, error) {
	if _, err := ParseKind(string(o.Kind)); err != nil {
		return Choice{}, err
	}
	var in []int
	for i, p := range preds {
		if o.Bounds.Allows(p.Candidate) {
			in = append(in, i)
		}
	}
	if len(in) == 0 {
		return Choice{}, fmt.Errorf("choose %s among %d: %w", o.Kind, len(preds), ErrNoCandidates)
	}
	feasible := in[:0:0]
	for _, i := range in {
		p := preds[i]
		if (o.DeadlineS == 0 || p.TotalS <= o.DeadlineS) && (o.BudgetUSD == 0 || p.TotalUSD <= o.BudgetUSD) {
			feasible = append(feasible, i)
		}
	}
	if len(feasible) == 0 {
		if o.DeadlineS > 0 {
			i := argmin(preds, in, byTime)
			return Choice{i, fmt.Sprintf("no candidate meets the deadline of %.0f s (and budget); fastest is %s at %.0f s", o.DeadlineS, preds[i].Candidate, preds[i].TotalS)}, nil
		}
		i := argmin(preds, in, byCost)
		return Choice{i, fmt.Sprintf("no candidate meets the budget of %s; cheapest is %s at %s", USD(o.BudgetUSD), preds[i].Candidate, USD(preds[i].TotalUSD))}, nil
	}
	limit := ""
	if o.DeadlineS > 0 {
		limit += fmt.Sprintf(" within %.0f s", o.DeadlineS)
	}
	if o.BudgetUSD > 0 {
		limit += " within " + USD(o.BudgetUSD)
	}
	switch o.Kind {
	case Time:
		i := argmin(preds, feasible, byTime)
		return Choice{i, fmt.Sprintf("least time%s: %s, %.0f s, %s", limit, preds[i].Candidate, preds[i].TotalS, USD(preds[i].TotalUSD))}, nil
	case Cost:
		i := argmin(preds, feasible, byCost)
		return Choice{i, fmt.Sprintf("least cost%s: %s, %.0f s, %s", limit, preds[i].Candidate, preds[i].TotalS, USD(preds[i].TotalUSD))}, nil
	default:
		xs := make([]float64, len(feasible))
		ys := make([]float64, len(feasible))
		for j, i := range feasible {
			xs[j], ys[j] = preds[i].TotalS, preds[i].TotalUSD
		}
		k := KneeIndex(xs, ys)
		i := feasible[k]
		return Choice{i, fmt.Sprintf("knee of the time-cost front%s: %s, %.0f s, %s", limit, preds[i].Candidate, preds[i].TotalS, USD(preds[i].TotalUSD))}, nil
	}
}

type less func(a, b predict.Prediction) bool

func byTime(a, b predict.Prediction) bool {
	if a.TotalS != b.TotalS {
		return a.TotalS < b.TotalS
	}
	return a.TotalUSD < b.TotalUSD
}

func byCost(a, b predict.Prediction) bool {
	if a.TotalUSD != b.TotalUSD {
		return a.TotalUSD < b.TotalUSD
	}
	return a.TotalS < b.TotalS
}

func argmin(preds []predict.Prediction, idx []int, lt less) int {
	best := idx[0]
	for _, i := range idx[1:] {
		if lt(preds[i], preds[best]) {
			best = i
		}
	}
	return best
}

// Pareto returns the indices of the points not dominated in (x, y), both
// minimised, sorted by increasing x.
func Pareto(xs, ys []float64) []int {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		if xs[idx[a]] != xs[idx[b]] {
			return xs[idx[a]] < xs[idx[b]]
		}
		return ys[idx[a]] < ys[idx[b]]
	})
	var front []int
	best := math.Inf(1)
	for _, i := range idx {
		if ys[i] < best {
			front = append(front, i)
			best = ys[i]
		}
	}
	return front
}

// KneeIndex returns the index (into xs, ys) of the knee of the Pareto front of
// the points, by offline Kneedle on a convex decreasing curve: min–max
// normalise the front, and take the point with the largest difference
// (1 − y_n) − x_n, i.e. the least x_n + y_n. Ties go to the smaller x.
func KneeIndex(xs, ys []float64) int {
	front := Pareto(xs, ys)
	if len(front) <= 2 {
		if len(front) == 0 {
			return 0
		}
		return front[0]
	}
	x0, x1 := xs[front[0]], xs[front[len(front)-1]]
	y0, y1 := ys[front[len(front)-1]], ys[front[0]]
	best, bestD := front[0], math.Inf(1)
	for _, i := range front {
		d := (xs[i]-x0)/(x1-x0) + (ys[i]-y0)/(y1-y0)
		if d < bestD-1e-12 {
			best, bestD = i, d
		}
	}
	return best
}

// Rank returns the indices of preds ordered for kind: by total time, by total
// cost, or (knee) by the Kneedle distance x_n + y_n of the min–max
// normalised (time, cost) points, nearest the knee first. Ties keep input
// order. It is the order of `scavctl plan`.
func Rank(preds []predict.Prediction, kind Kind) ([]int, error) {
	if _, err := ParseKind(string(kind)); err != nil {
		return nil, err
	}
	idx := make([]int, len(preds))
	for i := range idx {
		idx[i] = i
	}
	key := make([]float64, len(preds))
	switch kind {
	case Time:
		for i, p := range preds {
			key[i] = p.TotalS
		}
	case Cost:
		for i, p := range preds {
			key[i] = p.TotalUSD
		}
	default:
		minX, maxX, minY, maxY := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
		for _, p := range preds {
			minX, maxX = math.Min(minX, p.TotalS), math.Max(maxX, p.TotalS)
			minY, maxY = math.Min(minY, p.TotalUSD), math.Max(maxY, p.TotalUSD)
		}
		norm := func(v, lo, hi float64) float64 {
			if hi <= lo {
				return 0
			}
			return (v - lo) / (hi - lo)
		}
		for i, p := range preds {
			key[i] = norm(p.TotalS, minX, maxX) + norm(p.TotalUSD, minY, maxY)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return key[idx[a]] < key[idx[b]] })
	return idx, nil
}

// USD formats a dollar amount with the digits it needs: cents from $0.10
// up, three significant digits below ($0.00834, $0.002), so that a small
// budget, cost or spend is never shown as $0.00.
func USD(v float64) string {
	switch {
	case v == 0:
		return "$0"
	case math.Abs(v) >= 0.1:
		return fmt.Sprintf("$%.2f", v)
	}
	digits := 2 - int(math.Floor(math.Log10(math.Abs(v))))
	s := strconv.FormatFloat(v, 'f', digits, 64)
	return "$" + strings.TrimRight(strings.TrimRight(s, "0"), ".")
}
