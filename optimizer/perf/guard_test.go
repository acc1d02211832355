package perf

import (
	"math"
	"testing"
)

func TestGuard(t *testing.T) {
	tests := []struct {
		name  string
		pts   []Point
		want  Free
		notes int
	}{
		{"one local batch: compute ∝ √local batch", []Point{{1, 1, 32, 0.5, 0}, {1, 4, 32, 0.7, 0.2}},
			Free{Gamma: true, Root: true, Single: 1}, 1},
		{"two locals, one regime", []Point{{1, 1, 32, 0.5, 0}, {1, 1, 64, 0.8, 0}},
			Free{AlphaC: true}, 0},
		// Four corners with a full node: 4 configs + 3 multi-replica = 7
		// measurements; α_c, β_c, one level per regime, γ fit; δ needs four
		// local batches.
		{"full node and corners", []Point{{1, 1, 32, 0.5, 0}, {1, 4, 32, 0.7, 0.2}, {1, 4, 256, 1.6, 0.2}, {4, 16, 256, 1.9, 0.5}},
			Free{AlphaC: true, Gamma: true, Single: 1, Multi: 1}, 0},
		// Two configurations: the budget is 2 + 1 = 3, the form wants 4
		// (α_c, β_c, γ, the multi-node level): γ goes first.
		{"too few for overlap", []Point{{1, 1, 32, 0.5, 0}, {2, 8, 128, 1.5, 0.4}},
			Free{AlphaC: true, Multi: 1}, 1},
		// One configuration of one replica: β_c alone.
		{"one point", []Point{{1, 1, 32, 0.5, 0}}, Free{Root: true}, 1},
	}
	for _, tc := range tests {
		got, notes := Guard(tc.pts)
		if got != tc.want || len(notes) != tc.notes {
			t.Errorf("%s: %+v %v, want %+v with %d notes", tc.name, got, notes, tc.want, tc.notes)
		}
		if s := summarise(tc.pts); got.Count() > s.configs+s.multiReplica {
			t.Errorf("%s: %d parameters from %d measurements", tc.name, got.Count(), s.configs+s.multiReplica)
		}
	}
}

// TestFitOneLocalBatchIsNotConstant is issue 14's degenerate fit: probes at
// one local batch must not give a compute time that no batch changes.
func TestFitOneLocalBatchIsNotConstant(t *testing.T) {
	f, err := Fit([]Point{{1, 1, 32, 0.1, 0}, {1, 4, 32, 0.15, 0.05}, {4, 16, 32, 0.3, 0.2}})
	if err != nil {
		t.Fatal(err)
	}
	// √8 between flat and ×8; the interval spans both.
	if a, b := f.StepTime(1, 1, 32), f.StepTime(1, 1, 256); math.Abs(b/a-math.Sqrt(8)) > 0.05 {
		t.Errorf("step at local 256 = %g, at 32 = %g: want √8 times (%v)", b, a, f.Notes)
	}
	if lo, _, hi := f.Interval(1, 1, 256); lo > 0.1*1.01 || hi < 0.8*0.99 {
		t.Errorf("interval at 256 [%g, %g], want from flat (0.1) to proportional (0.8)", lo, hi)
	}
}

func TestBounds(t *testing.T) {
	b := NewBounds([]Point{{1, 4, 32, 1.0, 0.4}, {1, 4, 128, 2.0, 0.4}, {1, 1, 64, 0.9, 0}})
	inf := math.Inf(1)
	tests := []struct {
		name   string
		n, k   int
		m      float64
		lo, hi float64
	}{
		// Between two measured local batches of (1,4): max(1, 2·64/128) ..
		// min(2, 1·64/32); compute at 64 is at least 0.9 (K=1 measured).
		{"between", 1, 4, 64, 1.0, 2.0},
		{"below the first", 1, 4, 16, 0.5, 1.0},
		{"above the last", 1, 4, 256, 2.0, 4.0},
		// Unmeasured placement: compute only (0.9 at 64, 1.6 at 128 from
		// (1,4,128)'s compute), no upper bound.
		{"other placement", 2, 8, 64, 0.9, inf},
		{"other placement, small batch", 2, 8, 16, 0.6 * 16 / 32, inf},
	}
	for _, tc := range tests {
		lo, hi := b.At(tc.n, tc.k, tc.m)
		if math.Abs(lo-tc.lo) > 1e-12 || (hi != tc.hi && math.Abs(hi-tc.hi) > 1e-12) {
			t.Errorf("%s: [%g, %g], want [%g, %g]", tc.name, lo, hi, tc.lo, tc.hi)
		}
	}
}

// TestInterval: inside the measured region the interval is the
// cross-validated error around the point; outside it reaches the physical
// lower bound (perfect scaling of the measured compute).
func TestInterval(t *testing.T) {
	truth := Pollux{AlphaC: 0.03, BetaC: 0.001, AlphaR: 0.02, BetaR: 0.002, AlphaN: 0.08, BetaN: 0.004, Gamma: 1.2}
	var pts []Point
	for _, c := range []struct{ n, k int }{{1, 1}, {1, 4}} {
		for _, m := range []float64{32, 128, 512} {
			st := truth.StepTime(c.n, c.k, m)
			pts = append(pts, Point{c.n, c.k, m, st, math.Min(truth.Sync(c.n, c.k), st)})
		}
	}
	f, err := Fit(pts)
	if err != nil {
		t.Fatal(err)
	}
	if !(f.CV >= 0) {
		t.Fatalf("CV %g with 6 configurations", f.CV)
	}
	lo, pt, hi := f.Interval(1, 4, 64)
	if !(lo <= pt && pt <= hi) || hi/lo > math.Exp(2*Z90*f.CV)*(1+1e-9) {
		t.Errorf("inside: [%g, %g, %g] with CV %g", lo, pt, hi, f.CV)
	}
	lo, pt, hi = f.Interval(4, 16, 64)
	if want := truth.Grad(32) * 2; lo > want || !(lo < pt && pt < hi) {
		t.Errorf("multi-node, unmeasured: [%g, %g, %g], want the lower bound at most perfect scaling %g", lo, pt, hi, want)
	}
}

// TestIntervalOfAFitAtItsLowerBound is a live job's loc.half fit (two
// configurations, bench-cloud): the multi-node point's small compute made
// the fitted compute fall with the local batch, so at 1 × 128 the point
// was at the lower bound (1 × 32's step), and the interval had no width:
// the policy moved there as if it had been measured. It ran 3.6 times
// slower. The interval must leave room above the point: twice it, within
// the upper bound the 1 × 32 measurement gives (no more time per sample).
func TestIntervalOfAFitAtItsLowerBound(t *testing.T) {
	f, err := Fit([]Point{{1, 1, 32, 0.0353, 0.0102}, {2, 2, 64, 0.0673, 0.0448}})
	if err != nil {
		t.Fatal(err)
	}
	lo, pt, hi := f.Interval(1, 1, 128)
	if lo > 0.0353*1.0001 || hi < 2*pt*0.9999 || hi > 4*0.0353*1.0001 || !(lo <= pt && pt <= hi) {
		t.Errorf("interval at 1 × 128 [%g, %g, %g], want from 1 × 32's step (0.0353) to twice the point, within four times the step", lo, pt, hi)
	}
	if _, pt, hi := f.Interval(1, 1, 512); hi > 16*0.0353*1.0001 || hi < 2*pt*0.9999 {
		t.Errorf("interval at 1 × 512 up to %g (point %g)", hi, pt)
	}
}
