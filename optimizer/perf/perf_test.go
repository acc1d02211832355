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

func TestFitScavengerOneBatch(t *testing.T) {
	got, err := FitScavenger([]Point{{1, 1, 32, 0.5, 0.1}, {1, 1, 32, 0.7, 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	if got.BetaC != 0 || math.Abs(got.AlphaC-0.5) > 1e-12 {
		t.Fatalf("got %+v, want mean compute 0.5 and no slope", got)
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
	one, err := Fit([]Point{{2, 8, 32, 0.5, 0.1}, {2, 8, 32, 0.7, 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	if one.Form() != FormMeasured || math.Abs(one.StepTime(2, 8, 32)-0.6) > 1e-12 || !math.IsInf(one.StepTime(2, 8, 64), 1) || !math.IsInf(one.StepTime(1, 8, 32), 1) {
		t.Fatalf("one config: %+v", one.Model)
	}
	two := []Point{{1, 1, 32, 0.5, 0}, {1, 1, 256, 1.5, 0}}
	f, err := Fit(two)
	if err != nil {
		t.Fatal(err)
	}
	if f.Form() != FormScavenger || f.Configs != 2 {
		t.Fatalf("form %s configs %d", f.Form(), f.Configs)
	}
	tests := []struct {
		name string
		pts  []Point
		want Form
	}{
		{"three configs, one replica count", []Point{{1, 1, 32, 0.5, 0}, {1, 1, 64, 0.8, 0}, {1, 1, 256, 1.5, 0}}, FormScavenger},
		{"three configs, two batches and two replica counts", []Point{{1, 1, 32, 0.5, 0}, {1, 1, 256, 1.5, 0}, {1, 4, 64, 0.9, 0.2}}, FormPollux},
	}
	for _, tc := range tests {
		f, err := Fit(tc.pts)
		if err != nil {
			t.Fatal(err)
		}
		if f.Form() != tc.want {
			t.Errorf("%s: form %s, want %s", tc.name, f.Form(), tc.want)
		}
	}
}

func TestConfidence(t *testing.T) {
	f := &Fitted{RMSLE: 0.01, Range: Range{MinLocal: 32, MaxLocal: 256, MaxReplicas: 16, MaxNodes: 2, SingleNodeMulti: true, MultiNode: true}}
	tests := []struct {
		n, k int
		m    float64
		want string
	}{
		{1, 4, 64, "measured-range"},
		{2, 16, 256, "measured-range"},
		{4, 32, 64, "extrapolated"},
		{1, 4, 512, "extrapolated"},
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
