package plugins

import (
	"math"
	"testing"
	"time"
)

// TestChargeAtChangingPrices checks a machine billed at a price that
// changes during its life: the price in effect at a time, the cost of a
// window, and the whole cost with the minimum billed at the last price.
func TestChargeAtChangingPrices(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	end := at(40)
	c := Charge{USDPerHour: 3.6, Start: t0, End: &end, Granularity: time.Second, Minimum: time.Minute, // $0.001 a second
		Prices: []PriceChange{{At: at(10), USDPerHour: 7.2}, {At: at(30), USDPerHour: 36}}} // then $0.002, then $0.01
	for _, tc := range []struct {
		at   float64
		want float64
	}{{-1, 3.6}, {0, 3.6}, {9.9, 3.6}, {10, 7.2}, {29, 7.2}, {30, 36}, {100, 36}} {
		if got := c.PriceAt(at(tc.at)); got != tc.want {
			t.Errorf("PriceAt(%g) = %g, want %g", tc.at, got, tc.want)
		}
	}
	for _, tc := range []struct {
		lo, hi, want float64
	}{
		{0, 10, 0.01}, {0, 40, 0.01 + 0.04 + 0.1}, {5, 15, 0.005 + 0.01}, {12, 14, 0.004}, {35, 40, 0.05}, {20, 10, 0},
	} {
		if got := c.USDBetween(at(tc.lo), at(tc.hi)); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("USDBetween(%g, %g) = %g, want %g", tc.lo, tc.hi, got, tc.want)
		}
	}
	// 40 s used, 60 s billed: the 20 s more at the last price.
	if got, want := c.CostUSD(at(100)), 0.15+20*0.01; math.Abs(got-want) > 1e-12 {
		t.Errorf("CostUSD = %g, want %g", got, want)
	}
	running := c
	running.End = nil
	if got, want := running.CostUSD(at(35)), 0.01+0.04+0.05; math.Abs(got-want) > 1e-12 {
		t.Errorf("CostUSD of a running machine = %g, want %g (no minimum yet)", got, want)
	}
	flat := Charge{USDPerHour: 3.6, Start: t0, End: &end, Granularity: time.Second, Minimum: time.Minute}
	if got := flat.CostUSD(at(100)); math.Abs(got-flat.USD(flat.Billed(40))) > 1e-12 {
		t.Errorf("CostUSD at one price = %g, want USD(Billed) %g", got, flat.USD(flat.Billed(40)))
	}
}
