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
	in.Models["c"], in.Prices["c"] = constStep(math.Inf(1)), 1
	all, err := All([]Candidate{cur, {Type: "z", Nodes: 1, Workers: 1, Batch: 32}, {Type: "c", Nodes: 1, Workers: 1, Batch: 32}}, in)
	if err != nil || len(all) != 1 {
		t.Errorf("All: %d, %v", len(all), err)
	}
}

func TestEnumerate(t *testing.T) {
	tests := []struct {
		name   string
		shapes []Shape
		lim    Limits
		want   int
		first  Candidate
		last   Candidate
		err    bool
	}{
		{name: "one type", shapes: []Shape{{"aws", 4, 3}}, want: 6 * 2, lim: Limits{},
			first: Candidate{"aws", 1, 1, 32}, last: Candidate{"aws", 3, 12, 64}},
		{name: "local bounds", shapes: []Shape{{"aws", 4, 3}}, lim: Limits{MinLocal: 8, MaxLocal: 32}, want: 8,
			first: Candidate{"aws", 1, 1, 32}, last: Candidate{"aws", 2, 8, 64}},
		{name: "bad shape", shapes: []Shape{{"aws", 0, 3}}, err: true},
	}
	for _, tc := range tests {
		got, err := Enumerate(tc.shapes, []int{64, 32}, tc.lim)
		if tc.err {
			if !errors.Is(err, ErrBadCandidate) {
				t.Errorf("%s: err = %v", tc.name, err)
			}
			continue
		}
		if err != nil || len(got) != tc.want || got[0] != tc.first || got[len(got)-1] != tc.last {
			t.Errorf("%s: %v, %v", tc.name, got, err)
		}
	}
}
