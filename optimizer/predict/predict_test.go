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

func TestPessimistic(t *testing.T) {
	p := Prediction{StepTime: 1, StepLo: 0.5, StepHi: 3, RemainingS: 100, RemainingUSD: 10, SwitchS: 30, SwitchUSD: 3,
		TotalS: 130, TotalUSD: 13, TotalSHi: 330, TotalUSDHi: 33}
	if e := p.Pessimistic(); e.StepTime != 3 || e.TotalS != 330 || e.TotalUSD != 33 || e.RemainingS != 300 {
		t.Errorf("pessimistic %+v", e)
	}
	m := Prediction{StepTime: 1, StepLo: 1, StepHi: 1, TotalS: 130, TotalSHi: 130}
	if e := m.Pessimistic(); e != m {
		t.Errorf("a measured prediction changed: %+v", e)
	}
}

type rangedStep struct{ lo, pt, hi float64 }

func (r rangedStep) StepTime(int, int, float64) float64 { return r.pt }
func (r rangedStep) Interval(int, int, float64) (float64, float64, float64) {
	return r.lo, r.pt, r.hi
}

type fixedSteps float64

func (f fixedSteps) Steps(remaining float64, batch int) float64 { return float64(f) }

// TestPredictInterval: a Ranged model's interval reaches the totals and
// flags a wide one; Statistics replace the gain.
func TestPredictInterval(t *testing.T) {
	cur := Candidate{Type: "a", Nodes: 1, Workers: 1, Batch: 32}
	in := Inputs{Models: map[string]StepTimer{"a": rangedStep{0.5, 1, 2}}, Prices: map[string]float64{"a": 3.6}, M0: 32, Sqr: 1, Var: 1, Remaining: 100, Current: cur}
	p, err := Predict(cur, in)
	if err != nil {
		t.Fatal(err)
	}
	if p.StepLo != 0.5 || p.StepHi != 2 || p.TotalSLo != 50 || p.TotalSHi != 200 || p.Flags&FlagLowConfidence == 0 {
		t.Errorf("%+v", p)
	}
	in.Models["a"] = rangedStep{0.95, 1, 1.05}
	in.Stats = fixedSteps(10)
	if p, err = Predict(cur, in); err != nil || p.Flags != 0 || p.TotalS != 10 || p.Gain != 10 {
		t.Errorf("narrow, 10 steps: %+v %v", p, err)
	}
}

func TestMarkNonMonotone(t *testing.T) {
	c := func(b int) Candidate { return Candidate{Type: "a", Nodes: 1, Workers: 2, Batch: b} }
	tests := []struct {
		name  string
		steps []float64 // at batches 64, 128, 256
		want  []Flag
	}{
		{"sublinear", []float64{1, 1.5, 2.5}, []Flag{0, 0, 0}},
		{"faster at a larger batch", []float64{1, 0.8, 1.5}, []Flag{FlagNonMonotone, FlagNonMonotone, 0}},
		{"dearer per sample", []float64{1, 1.5, 3.5}, []Flag{0, FlagNonMonotone, FlagNonMonotone}},
	}
	for _, tc := range tests {
		var preds []Prediction
		for _, b := range []int{256, 64, 128} { // in any order
			j := map[int]int{64: 0, 128: 1, 256: 2}[b]
			preds = append(preds, Prediction{Candidate: c(b), StepTime: tc.steps[j]})
		}
		MarkNonMonotone(preds)
		for _, p := range preds {
			j := map[int]int{64: 0, 128: 1, 256: 2}[p.Batch]
			if p.Flags != tc.want[j] {
				t.Errorf("%s: batch %d flags %v, want %v", tc.name, p.Batch, p.Flags, tc.want[j])
			}
		}
	}
	if s := (FlagLowConfidence | FlagNonMonotone).String(); s != "low-confidence,non-monotone" {
		t.Errorf("flags %q", s)
	}
}
