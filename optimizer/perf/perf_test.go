package perf

import (
	"errors"
	"math"
	"testing"
)

func TestPointValidate(t *testing.T) {
	tests := []struct {
		name string
		p    Point
		ok   bool
	}{
		{"ok", Point{1, 1, 32, 0.5, 0}, true},
		{"more nodes than replicas", Point{2, 1, 32, 0.5, 0}, false},
		{"zero nodes", Point{0, 1, 32, 0.5, 0}, false},
		{"zero batch", Point{1, 1, 0, 0.5, 0}, false},
		{"nan step", Point{1, 1, 32, math.NaN(), 0}, false},
		{"inf step", Point{1, 1, 32, math.Inf(1), 0}, false},
		{"sync above step", Point{1, 2, 32, 0.5, 0.6}, false},
		{"negative sync", Point{1, 2, 32, 0.5, -0.1}, false},
	}
	for _, tc := range tests {
		err := tc.p.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBadPoint)) {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
}

func TestFitErrors(t *testing.T) {
	if _, err := Fit(nil); !errors.Is(err, ErrNoPoints) {
		t.Fatalf("empty: %v", err)
	}
	if _, err := Fit([]Point{{1, 1, 32, 0.5, 0}, {1, 1, -1, 0.5, 0}}); !errors.Is(err, ErrBadPoint) {
		t.Fatalf("bad: %v", err)
	}
	if _, err := FitPollux(nil); !errors.Is(err, ErrNoPoints) {
		t.Fatalf("pollux empty: %v", err)
	}
}

func TestFitScavengerExact(t *testing.T) {
	truth := Scavenger{AlphaC: 0.05, BetaC: 0.002, AlphaS: 0.01, BetaS: 0.02}
	var pts []Point
	for _, c := range []struct{ k, m int }{{1, 32}, {1, 256}, {8, 32}, {8, 256}} {
		st := truth.StepTime(1, c.k, float64(c.m))
		sync := truth.AlphaS + truth.BetaS*float64(c.k)
		pts = append(pts, Point{1, c.k, float64(c.m), st, sync})
	}
	got, err := FitScavenger(pts)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct{ k, m int }{{4, 100}, {16, 512}} {
		want := truth.StepTime(1, q.k, float64(q.m))
		if g := got.StepTime(1, q.k, float64(q.m)); math.Abs(g-want) > 1e-9 {
			t.Errorf("K=%d m=%d: %g, want %g", q.k, q.m, g, want)
		}
	}
}

// TestFitScavengerOneBatch: one local batch cannot tell an intercept from a
// slope, so compute is proportional to the local batch (Eq. 9), not a
// constant that no batch changes.
func TestFitScavengerOneBatch(t *testing.T) {
	got, err := FitScavenger([]Point{{1, 1, 32, 0.5, 0.1}, {1, 1, 32, 0.7, 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	if got.AlphaC != 0 || math.Abs(got.BetaC-0.5/32) > 1e-12 {
		t.Fatalf("got %+v, want compute 0.5 s at 32 through the origin", got)
	}
	if c := got.StepTime(1, 1, 64) - got.StepTime(1, 1, 32); math.Abs(c-0.5) > 1e-12 {
		t.Fatalf("doubling the local batch adds %g s of compute, want 0.5", c)
	}
}

func TestFitPolluxRecovers(t *testing.T) {
	truth := Pollux{AlphaC: 0.03, BetaC: 0.001, AlphaR: 0.01, BetaR: 0.002, AlphaN: 0.08, BetaN: 0.004, Gamma: 1.5}
	type cfg struct{ n, k int }
	var pts []Point
	for _, c := range []cfg{{1, 1}, {1, 4}, {1, 8}, {2, 16}, {4, 32}} {
		for _, m := range []float64{32, 128, 512} {
			pts = append(pts, Point{c.n, c.k, m, truth.StepTime(c.n, c.k, m), math.Min(truth.Sync(c.n, c.k), truth.StepTime(c.n, c.k, m))})
		}
	}
	f, err := Fit(pts)
	if err != nil {
		t.Fatal(err)
	}
	if f.Form() != FormPollux {
		t.Fatalf("form = %s, want pollux", f.Form())
	}
	tests := []struct {
		n, k int
		m    float64
	}{{1, 2, 64}, {1, 6, 256}, {3, 24, 100}, {2, 16, 400}}
	for _, q := range tests {
		want := truth.StepTime(q.n, q.k, q.m)
		got := f.StepTime(q.n, q.k, q.m)
		if rel := math.Abs(got-want) / want; rel > 0.05 {
			t.Errorf("N=%d K=%d m=%g: %g, want %g (%.1f%%)", q.n, q.k, q.m, got, want, 100*rel)
		}
	}
	if f.RMSLE > 0.03 {
		t.Errorf("RMSLE = %g", f.RMSLE)
	}
}

func TestFitChoosesForm(t *testing.T) {
	// One configuration: compute ∝ local batch and one sync level, a prior
	// whose intervals say it is one.
	one, err := Fit([]Point{{2, 8, 32, 0.5, 0.1}, {2, 8, 32, 0.7, 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	if one.Form() != FormPollux || math.Abs(one.StepTime(2, 8, 32)-0.6) > 0.01 || !math.IsNaN(one.CV) {
		t.Fatalf("one config: %+v", one)
	}
	if lo, _, hi := one.Interval(2, 8, 64); !(hi > 1.5*lo) {
		t.Fatalf("one config at another batch: [%g, %g]", lo, hi)
	}
	two := []Point{{1, 1, 32, 0.5, 0}, {1, 1, 256, 1.5, 0}}
	f, err := Fit(two)
	if err != nil {
		t.Fatal(err)
	}
	if f.Form() != FormPollux || f.Configs != 2 || !math.IsNaN(f.CV) {
		t.Fatalf("form %s configs %d CV %g", f.Form(), f.Configs, f.CV)
	}
	// Compute linear in local batch (0.5 s at 32, 1.5 s at 256): the
	// linear form cross-validates perfectly, Pollux's nearly so.
	tests := []struct {
		name string
		pts  []Point
		want Form
	}{
		{"three configs on a line", []Point{{1, 1, 32, 0.5, 0}, {1, 1, 64, 0.5 + 32.0/224, 0}, {1, 1, 256, 1.5, 0}}, FormScavenger},
		{"overlapping sync", []Point{{1, 1, 32, 0.5, 0}, {1, 1, 256, 1.5, 0}, {1, 4, 64, 0.62, 0.5}, {1, 4, 256, 1.5, 0.5}, {1, 8, 256, 1.52, 0.6}}, FormPollux},
	}
	for _, tc := range tests {
		f, err := Fit(tc.pts)
		if err != nil {
			t.Fatal(err)
		}
		if f.Form() != tc.want {
			t.Errorf("%s: form %s, want %s (notes %v, CV %g)", tc.name, f.Form(), tc.want, f.Notes, f.CV)
		}
	}
}

func TestConfidence(t *testing.T) {
	f := &Fitted{RMSLE: 0.01, Range: Range{MinLocal: 32, MaxLocal: 256, MaxReplicas: 16, MaxNodes: 2, SingleNodeMulti: true, MultiNode: true,
		SingleK: [2]int{2, 4}, MultiK: [2]int{8, 16}}}
	tests := []struct {
		n, k int
		m    float64
		want string
	}{
		{1, 4, 64, "measured-range"},
		{2, 16, 256, "measured-range"},
		{4, 32, 64, "extrapolated"},
		{1, 4, 512, "extrapolated"},
		{1, 8, 64, "extrapolated"},
	}
	for _, tc := range tests {
		if got := f.Confidence(tc.n, tc.k, tc.m); got != tc.want {
			t.Errorf("(%d,%d,%g) = %s, want %s", tc.n, tc.k, tc.m, got, tc.want)
		}
	}
	f.RMSLE = 0.2
	if got := f.Confidence(1, 4, 64); got != "poor-fit" {
		t.Errorf("poor fit = %s", got)
	}
}
