package objective

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

func pred(k, b int, s, usd float64) predict.Prediction {
	return predict.Prediction{Candidate: predict.Candidate{Type: "a", Nodes: 1, Workers: k, Batch: b}, TotalS: s, TotalUSD: usd}
}

func TestChoose(t *testing.T) {
	preds := []predict.Prediction{
		pred(1, 32, 1000, 1.0), // slow, cheap
		pred(2, 64, 520, 1.1),  // knee
		pred(4, 128, 300, 2.0), //
		pred(8, 256, 250, 4.0), // fastest
		pred(8, 256, 900, 5.0), // dominated
	}
	tests := []struct {
		name   string
		o      Objective
		want   int
		reason string
		err    error
	}{
		{"time", Objective{Kind: Time}, 3, "least time", nil},
		{"cost", Objective{Kind: Cost}, 0, "least cost", nil},
		{"knee", Objective{Kind: Knee}, 1, "knee", nil},
		{"cost under deadline", Objective{Kind: Cost, DeadlineS: 600}, 1, "within 600 s", nil},
		{"time under budget", Objective{Kind: Time, BudgetUSD: 2.5}, 2, "within $2.50", nil},
		{"deadline impossible", Objective{Kind: Cost, DeadlineS: 100}, 3, "no candidate meets the deadline", nil},
		{"budget impossible", Objective{Kind: Time, BudgetUSD: 0.5}, 0, "no candidate meets the budget", nil},
		{"bounded workers", Objective{Kind: Time, Bounds: Bounds{MaxWorkers: 4}}, 2, "least time", nil},
		{"bounded local batch", Objective{Kind: Cost, Bounds: Bounds{MinLocal: 32, MinBatch: 64}}, 1, "least cost", nil},
		{"nothing in bounds", Objective{Kind: Time, Bounds: Bounds{MinWorkers: 16}}, 0, "", ErrNoCandidates},
		{"unknown", Objective{Kind: "fast"}, 0, "", ErrUnknownKind},
	}
	for _, tc := range tests {
		c, err := Choose(preds, tc.o)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: err = %v", tc.name, err)
			}
			continue
		}
		if err != nil || c.Index != tc.want || !strings.Contains(c.Reason, tc.reason) {
			t.Errorf("%s: got %+v, %v; want %d (%q)", tc.name, c, err, tc.want, tc.reason)
		}
	}
}

func TestPareto(t *testing.T) {
	xs := []float64{3, 1, 2, 2, 5}
	ys := []float64{1, 5, 2, 3, 1}
	got := Pareto(xs, ys)
	want := []int{1, 2, 0}
	if len(got) != len(want) {
		t.Fatalf("front %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("front %v, want %v", got, want)
		}
	}
}

func TestKneeKnownCurves(t *testing.T) {
	curve := func(f func(float64) float64, lo, hi float64, n int) ([]float64, []float64) {
		xs, ys := make([]float64, n), make([]float64, n)
		for i := range xs {
			xs[i] = lo + (hi-lo)*float64(i)/float64(n-1)
			ys[i] = f(xs[i])
		}
		return xs, ys
	}
	tests := []struct {
		name  string
		f     func(float64) float64
		lo    float64
		hi    float64
		n     int
		wantX float64
		tol   float64
	}{
		// y = 1/x on [0.1, 10]: normalised, x_n + y_n is least near x = √(0.99·0.99·…) ≈ 1.
		{"hyperbola", func(x float64) float64 { return 1 / x }, 0.1, 10, 991, 1.0, 0.05},
		// Two straight segments meeting at x = 2: the corner is the knee.
		{"corner", func(x float64) float64 { return math.Max(10-4.5*x, 1.5-0.25*x) }, 0, 6, 61, 2.0, 0.11},
		// Exponential decay e^{-x} on [0, 5]: knee at x = ln(5·(1−e^{-5})/(1−e^{-5})·…) ≈ ln 5 ≈ 1.6.
		{"exponential", func(x float64) float64 { return math.Exp(-x) }, 0, 5, 501, 1.6, 0.05},
	}
	for _, tc := range tests {
		xs, ys := curve(tc.f, tc.lo, tc.hi, tc.n)
		k := KneeIndex(xs, ys)
		if math.Abs(xs[k]-tc.wantX) > tc.tol {
			t.Errorf("%s: knee at x = %g, want %g ± %g", tc.name, xs[k], tc.wantX, tc.tol)
		}
	}
	if KneeIndex([]float64{1}, []float64{1}) != 0 {
		t.Error("single point")
	}
}

func TestRank(t *testing.T) {
	preds := []predict.Prediction{pred(1, 32, 1000, 1.0), pred(2, 64, 520, 1.1), pred(8, 256, 250, 4.0)}
	tests := []struct {
		kind Kind
		want []int
	}{
		{Time, []int{2, 1, 0}},
		{Cost, []int{0, 1, 2}},
		{Knee, []int{1, 0, 2}},
	}
	for _, tc := range tests {
		got, err := Rank(preds, tc.kind)
		if err != nil {
			t.Fatal(err)
		}
		for i := range tc.want {
			if got[i] != tc.want[i] {
				t.Errorf("%s: %v, want %v", tc.kind, got, tc.want)
				break
			}
		}
	}
	if _, err := Rank(preds, "x"); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("unknown kind: %v", err)
	}
}

// TestSmallAmountsKeepTheirDigits: a budget of $0.002 is not shown as $0.00.
func TestSmallAmountsKeepTheirDigits(t *testing.T) {
	for v, want := range map[float64]string{0: "$0", 0.002: "$0.002", 0.00834: "$0.00834", 0.0021345: "$0.00213", 0.5: "$0.50", 12.5: "$12.50", 1234.567: "$1234.57"} {
		if got := USD(v); got != want {
			t.Errorf("USD(%g) = %q, want %q", v, got, want)
		}
	}
	preds := []predict.Prediction{{Candidate: predict.Candidate{Type: "a", Workers: 1, Batch: 32}, TotalS: 100, TotalUSD: 0.009}}
	c, err := Choose(preds, Objective{Kind: Time, BudgetUSD: 0.002})
	if err != nil || !strings.Contains(c.Reason, "budget of $0.002") || !strings.Contains(c.Reason, "$0.009") {
		t.Errorf("reason %q, %v: want the budget and the cost with their digits", c.Reason, err)
	}
}
