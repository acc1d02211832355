package predict

import (
	"errors"
	"math"
	"testing"
)

type constStep float64

func (c constStep) StepTime(int, int, float64) float64 { return float64(c) }

func TestPredict(t *testing.T) {
	cur := Candidate{Type: "a", Nodes: 1, Workers: 1, Batch: 32}
	in := Inputs{
		Models:    map[string]StepTimer{"a": constStep(0.5), "b": constStep(0.25)},
		Prices:    map[string]float64{"a": 3.6, "b": 36},
		M0:        32,
		Sqr:       1,
		Var:       1e9, // pure noise: gain = scale
		Remaining: 1000,
		Current:   cur,
		RelaunchS: 30,
	}
	tests := []struct {
		name      string
		c         Candidate
		wantS     float64
		wantUSD   float64
		wantSwS   float64
		wantErr   error
		wantGain  float64
		wantSwUSD float64
	}{
		{name: "current, no switch", c: cur, wantS: 500, wantUSD: 0.5, wantGain: 1},
		{name: "bigger batch on two nodes", c: Candidate{Type: "b", Nodes: 2, Workers: 16, Batch: 128}, wantS: 1000.0 / 4 * 0.25, wantUSD: 62.5 * 2 * 0.01, wantSwS: 30, wantSwUSD: 30 * 2 * 0.01, wantGain: 4},
		{name: "no model", c: Candidate{Type: "z", Nodes: 1, Workers: 1, Batch: 32}, wantErr: ErrNoModel},
		{name: "impossible", c: Candidate{Type: "a", Nodes: 2, Workers: 1, Batch: 32}, wantErr: ErrBadCandidate},
	}
	for _, tc := range tests {
		p, err := Predict(tc.c, in)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("%s: err = %v", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }
		if !near(p.RemainingS, tc.wantS) || !near(p.RemainingUSD, tc.wantUSD) || !near(p.SwitchS, tc.wantSwS) ||
			!near(p.SwitchUSD, tc.wantSwUSD) || !near(p.Gain, tc.wantGain) || !near(p.TotalS, tc.wantS+tc.wantSwS) {
			t.Errorf("%s: %+v", tc.name, p)
		}
	}
	if _, err := Predict(cur, Inputs{Models: in.Models, Prices: in.Prices}); !errors.Is(err, ErrBadInputs) {
		t.Errorf("M0 = 0: %v", err)
	}
	all, err := All([]Candidate{cur, {Type: "z", Nodes: 1, Workers: 1, Batch: 32}}, in)
	if err != nil || len(all) != 1 {
		t.Errorf("All: %d, %v", len(all), err)
	}
}

func TestStepsGrowing(t *testing.T) {
	tests := []struct {
		name        string
		R, s, u0, r float64
		want        float64
	}{
		{"constant noise equals R/gain", 100, 4, 3, 0, 100 / ((3.0 + 1) / (3.0/4 + 1))},
		{"no noise: one step per unit", 100, 4, 0, 1, 100},
		{"scale one", 100, 1, 3, 1, 100},
		{"huge growth tends to R/s", 100, 4, 1, 50, 100.0/4 + 0.75*(100-(5000-math.Log(2))/50)},
	}
	for _, tc := range tests {
		got := StepsGrowing(tc.R, tc.s, tc.u0, tc.r)
		if math.IsNaN(got) || math.Abs(got-tc.want) > 1e-6*math.Max(1, tc.want) {
			t.Errorf("%s: %g, want %g", tc.name, got, tc.want)
		}
	}
	// Numerical integration check.
	R, s, u0, r := 50.0, 8.0, 0.5, 0.05
	var num float64
	const n = 200000
	for i := 0; i < n; i++ {
		x := (float64(i) + 0.5) * R / n
		u := u0 * math.Exp(r*x)
		num += (u/s + 1) / (u + 1) * R / n
	}
	if got := StepsGrowing(R, s, u0, r); math.Abs(got-num) > 1e-6*num {
		t.Errorf("closed form %g, numeric %g", got, num)
	}
}
