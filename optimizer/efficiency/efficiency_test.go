package efficiency

import (
	"errors"
	"math"
	"testing"
)

func TestGainAndEfficiency(t *testing.T) {
	tests := []struct {
		name             string
		sqr, vari, scale float64
		want             float64
	}{
		{"no noise gains nothing", 1, 0, 8, 1},
		{"pure noise gains the scale", 0, 1, 8, 8},
		{"equal", 1, 1, 2, 2.0 / 1.5},
		{"scale one", 3, 5, 1, 1},
		{"scale below one", 3, 5, 0.5, 0.5},
	}
	for _, tc := range tests {
		g := Gain(tc.sqr, tc.vari, tc.scale)
		if math.Abs(g-tc.want) > 1e-12 {
			t.Errorf("%s: gain = %g, want %g", tc.name, g, tc.want)
		}
		if tc.scale > 1 && tc.sqr > 0 {
			m0 := 32.0
			phi := NoiseScale(tc.sqr, tc.vari, m0)
			if e := Efficiency(phi, m0, m0*tc.scale); math.Abs(e-g/tc.scale) > 1e-12 {
				t.Errorf("%s: efficiency %g != gain/scale %g", tc.name, e, g/tc.scale)
			}
		}
	}
}

func TestSteps(t *testing.T) {
	tests := []struct {
		rem, gain, want float64
		err             bool
	}{
		{100, 4, 25, false},
		{0, 4, 0, false},
		{100, 0, 0, true},
		{-1, 2, 0, true},
		{100, math.Inf(1), 0, true},
	}
	for _, tc := range tests {
		got, err := Steps(tc.rem, tc.gain)
		if tc.err != (err != nil) || (err != nil && !errors.Is(err, ErrBadInput)) || got != tc.want {
			t.Errorf("Steps(%g,%g) = %g, %v", tc.rem, tc.gain, got, err)
		}
	}
	if Remaining(10, 12) != 0 || Remaining(10, 4) != 6 {
		t.Error("Remaining")
	}
	if Goodput(4, 2) != 2 {
		t.Error("Goodput")
	}
}

func TestForecastIntegral(t *testing.T) {
	tests := []struct {
		name          string
		p0, p1, u0, a float64
		want          float64
	}{
		{"constant", 10, 110, 3, 0, 25},
		{"no noise", 10, 110, 0, 2, 100},
		{"linear growth", 10, 110, 3, 1, 10.0 / 3 * math.Log((1+3*11.0)/(1+3))},
		{"empty", 10, 5, 3, 1, 0},
	}
	for _, tc := range tests {
		got := ForecastIntegral(tc.p0, tc.p1, tc.u0, tc.a)
		if math.Abs(got-tc.want) > 1e-6*math.Max(1, tc.want) {
			t.Errorf("%s: %g, want %g", tc.name, got, tc.want)
		}
	}
}
