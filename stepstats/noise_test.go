package stepstats

import (
	"testing"

	"github.com/scavenger-ml/scavenger/telemetry"
)

func TestNoise(t *testing.T) {
	// Local 3, averaged 2 over 2 gradients of 32 at M0 = 64 (scale 1):
	// |G|² = (2·2−3)/1 = 1 and tr Σ = (3−2)·1/1 = 1, so B_noise = 64·1/1.
	n := Noise{M0: 64}
	for i := 1; i <= NoiseWarmup; i++ {
		if v, ok := n.Scale(); ok {
			t.Fatalf("a scale %v after %d samples, before the warm-up is over", v, i-1)
		}
		if !n.Add(normed(2, 0, 32, false)) {
			t.Fatal("a replica sample not taken")
		}
	}
	if n.Add(normed(1, 0, 32, false)) {
		t.Error("a single gradient taken")
	}
	if v, ok := n.Scale(); !ok || !near(v, 64) {
		t.Errorf("scale %v, %v; want 64", v, ok)
	}
	var zero Noise
	if zero.Add(normed(2, 0, 32, false)) {
		t.Error("the zero Noise took a sample without a base batch")
	}
}

func TestNoiseSeries(t *testing.T) {
	var recs []telemetry.StepRecord
	for s := int64(50); s >= 1; s-- { // any order
		r := normed(2, 0, 32, false)
		r.Step, r.Time = s, 100+float64(s)
		other := r
		other.Rank = 1
		other.LocalSqr = f64(100) // rank 1 does not count
		recs = append(recs, r, other)
	}
	all := NoiseSeries(recs, 64, 100, 1000)
	if len(all) != 50-NoiseWarmup+1 || all[0].T != NoiseWarmup || all[len(all)-1].T != 50 {
		t.Fatalf("series %v: want one point per step from step %d on, at seconds since t0", all, NoiseWarmup)
	}
	for _, p := range all {
		if !near(p.V, 64) {
			t.Fatalf("point %+v, want 64", p)
		}
	}
	for _, c := range []struct {
		n    int
		want []float64
	}{{3, []float64{10, 30, 50}}, {2, []float64{10, 50}}, {1, []float64{50}}, {0, nil}} {
		got := NoiseSeries(recs, 64, 100, c.n)
		if len(got) != len(c.want) {
			t.Fatalf("n %d: %v, want times %v", c.n, got, c.want)
		}
		for i := range got {
			if got[i].T != c.want[i] {
				t.Errorf("n %d: %v, want times %v", c.n, got, c.want)
			}
		}
	}
	if NoiseSeries(recs, 0, 100, 10) != nil {
		t.Error("a series without a base batch")
	}
}
