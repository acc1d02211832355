package stepstats

import (
	"errors"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/telemetry"
)

func f64(v float64) *float64 { return &v }

// normed is a step record with local 3 and averaged 2 squared norms.
func normed(world, count, local int, biased bool) telemetry.StepRecord {
	return telemetry.StepRecord{Job: "j", Attempt: 1, World: world, Step: 7, Count: count, Biased: biased,
		LocalBatch: local, GlobalBatch: world * local, LocalSqr: f64(3), AvgSqr: f64(2)}
}

func TestSample(t *testing.T) {
	noNorms := normed(2, 0, 32, false)
	noNorms.AvgSqr = nil
	negative := normed(2, 0, 32, false)
	negative.LocalSqr = f64(-1)
	for _, c := range []struct {
		name string
		rec  telemetry.StepRecord
		m0   float64
		want gns.Sample
		ok   bool
	}{
		{"replicas: count is the world", normed(4, 0, 32, false), 64, gns.Sample{LocalSqr: 3, TotalSqr: 2, Count: 4, Scale: 2}, true},
		{"Count wins over the world", normed(2, 8, 16, false), 32, gns.Sample{LocalSqr: 3, TotalSqr: 2, Count: 8, Scale: 4}, true},
		{"world 1, difference estimator", normed(1, 2, 32, true), 32, gns.Sample{LocalSqr: 3, TotalSqr: 2, Count: 2, Scale: 2, Biased: true}, true},
		{"Biased kept with replicas", normed(2, 0, 32, true), 32, gns.Sample{LocalSqr: 3, TotalSqr: 2, Count: 2, Scale: 2, Biased: true}, true},
		{"world 1 without Count: one gradient", normed(1, 0, 32, false), 32, gns.Sample{}, false},
		{"Count 1: one gradient", normed(2, 1, 32, false), 32, gns.Sample{}, false},
		{"no norms", noNorms, 32, gns.Sample{}, false},
		{"zero LocalBatch", normed(2, 0, 0, false), 32, gns.Sample{}, false},
		{"zero m0", normed(2, 0, 32, false), 0, gns.Sample{}, false},
		{"negative norm", negative, 32, gns.Sample{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := Sample(c.rec, c.m0)
			if got != c.want || ok != c.ok {
				t.Fatalf("Sample = %+v, %v; want %+v, %v", got, ok, c.want, c.ok)
			}
			// ok means exactly that the estimator takes it.
			if _, _, err := gns.Unbiased(got); (err == nil) != ok {
				t.Errorf("gns.Unbiased(%+v): %v, but ok %v", got, err, ok)
			}
		})
	}
	// A single gradient is what gns refuses as too few, not as bad.
	one := normed(1, 0, 32, false)
	s := gns.Sample{LocalSqr: *one.LocalSqr, TotalSqr: *one.AvgSqr, Count: 1, Scale: 1}
	if err := s.Validate(); !errors.Is(err, gns.ErrTooFew) {
		t.Errorf("a one-gradient sample: %v, want gns.ErrTooFew", err)
	}
}

func TestWindow(t *testing.T) {
	var w Window
	if _, ok := w.Mean(); ok || w.N() != 0 {
		t.Fatal("an empty window has a mean")
	}
	e, s := w.Update(gns.Estimator{}, 10)
	if s != (gns.Sample{}) || e.Steps() != 0 {
		t.Fatalf("an empty window updated the estimator: %+v", s)
	}
	rec := func(local, avg float64, biased bool) telemetry.StepRecord {
		r := normed(2, 0, 32, biased)
		r.LocalSqr, r.AvgSqr = f64(local), f64(avg)
		return r
	}
	for _, r := range []telemetry.StepRecord{rec(3, 2, false), rec(5, 4, false), normed(1, 0, 32, false)} {
		w.Add(r, 64)
	}
	if w.N() != 2 {
		t.Fatalf("%d samples, want 2: a one-gradient record has none", w.N())
	}
	if m, _ := w.Mean(); m != (gns.Sample{LocalSqr: 4, TotalSqr: 3, Count: 2, Scale: 1}) {
		t.Errorf("mean %+v", m)
	}
	e, s = w.Update(gns.Estimator{}, 10)
	want, _ := gns.Estimator{}.UpdateSteps(gns.Sample{LocalSqr: 4, TotalSqr: 3, Count: 2, Scale: 1}, 10)
	if s.Count != 2 || e != want {
		t.Errorf("Update gave %+v, %+v; want %+v", e, s, want)
	}
	// Replicas after the difference estimator restart the window; the
	// difference estimator after replicas marks it biased.
	w.Reset()
	w.Add(rec(9, 1, true), 64)
	w.Add(rec(3, 2, false), 64)
	if m, _ := w.Mean(); w.N() != 1 || m.Biased || m.LocalSqr != 3 {
		t.Errorf("after a biased then an unbiased sample: %d samples, mean %+v; want the unbiased one alone", w.N(), m)
	}
	w.Add(rec(5, 2, true), 64)
	if m, _ := w.Mean(); w.N() != 2 || !m.Biased || m.LocalSqr != 4 {
		t.Errorf("after an unbiased then a biased sample: %d samples, mean %+v; want both, biased", w.N(), m)
	}
}
