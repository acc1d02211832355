package gns

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func TestUnbiasedTable(t *testing.T) {
	tests := []struct {
		name          string
		s             Sample
		wantSqr, wVar float64
		wantErr       error
	}{
		{"expected values recover truth", Expected(2, 8, 32, 64, 4), 2, 8, nil},
		{"difference sample recovers truth", Expected(2, 8, 32, 64, 1), 2, 8, nil},
		{"count one", Sample{LocalSqr: 1, TotalSqr: 1, Count: 1, Scale: 1}, 0, 0, ErrTooFew},
		{"nan norm", Sample{LocalSqr: math.NaN(), TotalSqr: 1, Count: 2, Scale: 1}, 0, 0, ErrBadSample},
		{"negative norm", Sample{LocalSqr: 1, TotalSqr: -1, Count: 2, Scale: 1}, 0, 0, ErrBadSample},
		{"zero scale", Sample{LocalSqr: 1, TotalSqr: 1, Count: 2, Scale: 0}, 0, 0, ErrBadSample},
	}
	for _, tc := range tests {
		sqr, v, err := Unbiased(tc.s)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("%s: err = %v, want %v", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || math.Abs(sqr-tc.wantSqr) > 1e-9 || math.Abs(v-tc.wVar) > 1e-9 {
			t.Errorf("%s: (%g, %g, %v), want (%g, %g)", tc.name, sqr, v, err, tc.wantSqr, tc.wVar)
		}
	}
}

// synthetic draws the mean of n per-example gradients G + ξ, with ξ ~ N(0, σ²I)
// in d dimensions, so tr Σ per example = d·σ².
func synthetic(r *rand.Rand, g []float64, sigma float64, n int) []float64 {
	out := make([]float64, len(g))
	s := sigma / math.Sqrt(float64(n))
	for i := range g {
		out[i] = g[i] + s*r.NormFloat64()
	}
	return out
}

func sqNorm(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return s
}

// TestEstimatorRecoversKnownNoiseScale feeds gradients drawn with a known |G|²
// and tr Σ through the replica estimator and the difference estimator and
// checks the noise scale φ = M0·trΣ_M0/|G|² = trΣ_example/|G|².
func TestEstimatorRecoversKnownNoiseScale(t *testing.T) {
	const (
		d     = 200
		sigma = 0.5 // per-example std per coordinate
		m0    = 16.0
	)
	g := make([]float64, d)
	for i := range g {
		g[i] = 0.05
	}
	trueSqr := sqNorm(g)                       // 0.5
	trueBSimple := d * sigma * sigma / trueSqr // per-example trΣ / |G|² = 100
	tests := []struct {
		name     string
		replicas int
		local    int
	}{
		{"four replicas", 4, 32},
		{"eight replicas small batch", 8, 16},
		{"single replica difference", 1, 64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(tc.replicas)))
			e := Estimator{Decay: 0.99}
			var prev []float64
			for step := 0; step < 3000; step++ {
				var s Sample
				if tc.replicas == 1 {
					cur := synthetic(r, g, sigma, tc.local)
					if prev == nil {
						prev = cur
						continue
					}
					var err error
					if s, err = Difference(prev, cur, float64(tc.local)/m0); err != nil {
						t.Fatal(err)
					}
					prev = cur
				} else {
					mean := make([]float64, d)
					var local float64
					for k := 0; k < tc.replicas; k++ {
						gk := synthetic(r, g, sigma, tc.local)
						local += sqNorm(gk)
						for i := range mean {
							mean[i] += gk[i] / float64(tc.replicas)
						}
					}
					s = Sample{LocalSqr: local / float64(tc.replicas), TotalSqr: sqNorm(mean), Count: float64(tc.replicas), Scale: float64(tc.replicas*tc.local) / m0}
				}
				var err error
				if e, err = e.Update(s); err != nil {
					t.Fatal(err)
				}
			}
			phi := e.NoiseScale(m0)
			if rel := math.Abs(phi-trueBSimple) / trueBSimple; rel > 0.15 {
				t.Errorf("φ = %.1f, want %.1f (%.0f%% off)", phi, trueBSimple, 100*rel)
			}
			if rel := math.Abs(e.Sqr()-trueSqr) / trueSqr; rel > 0.15 {
				t.Errorf("|G|² = %.3f, want %.3f", e.Sqr(), trueSqr)
			}
		})
	}
}

func TestEstimatorBiasCorrection(t *testing.T) {
	// One sample must be reported exactly, not shrunk toward zero.
	e, err := Estimator{}.Update(Expected(3, 6, 32, 32, 4))
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(e.Sqr()-3) > 1e-9 || math.Abs(e.Var()-6) > 1e-9 || e.Steps() != 1 {
		t.Fatalf("after one sample: sqr %g var %g steps %d", e.Sqr(), e.Var(), e.Steps())
	}
	var zero Estimator
	if zero.Sqr() != 1 || zero.Var() != 0 {
		t.Fatalf("initial state: %g %g", zero.Sqr(), zero.Var())
	}
	// Switching from difference samples to replica samples resets.
	b, _ := Estimator{}.Update(Expected(100, 100, 32, 32, 1))
	if !b.Biased() {
		t.Fatal("difference sample should mark the estimator biased")
	}
	u, _ := b.Update(Expected(3, 6, 32, 32, 4))
	if u.Steps() != 1 || math.Abs(u.Sqr()-3) > 1e-9 {
		t.Fatalf("no reset: steps %d sqr %g", u.Steps(), u.Sqr())
	}
}

func TestDifferenceShape(t *testing.T) {
	if _, err := Difference([]float64{1}, []float64{1, 2}, 1); !errors.Is(err, ErrShape) {
		t.Fatalf("err = %v", err)
	}
}

func TestNormalizedNoise(t *testing.T) {
	tests := []struct {
		local, total float64
		k            int
		want         float64
		err          bool
	}{
		{4, 1, 4, 1, false},
		{1, 1, 4, 0.25, false},
		{1, 0, 4, 0, true},
		{1, 1, 0, 0, true},
	}
	for _, tc := range tests {
		got, err := NormalizedNoise(tc.local, tc.total, tc.k)
		if (err != nil) != tc.err || math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("NormalizedNoise(%g,%g,%d) = %g, %v", tc.local, tc.total, tc.k, got, err)
		}
	}
}
