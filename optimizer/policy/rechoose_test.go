package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// TestRechoose: a cost-optimised job measured types a (0.1 s a step) and b
// (0.05 s) and runs on a, the cheaper per step at spot prices; the policy
// re-decides over what is offered now from what it measured.
func TestRechoose(t *testing.T) {
	a := predict.Candidate{Type: "a", Nodes: 1, Workers: 1, Batch: 32}
	b := a
	b.Type = "b"
	spec := func(prices map[string]float64, cands ...predict.Candidate) Spec {
		return Spec{Candidates: cands, Prices: prices, M0: 32, Target: 1e5, Objective: objective.Objective{Kind: objective.Cost}, RelaunchS: 1}
	}
	spot := map[string]float64{"a": 0.01, "b": 0.04}
	aOnDemand := map[string]float64{"a": 0.10, "b": 0.04}
	history := []Observation{
		{ElapsedS: 2, Config: a, Steps: 20, StepTime: 0.1, Progress: 20},
		{ElapsedS: 4, Config: b, Steps: 20, StepTime: 0.05, Progress: 40},
		{ElapsedS: 6, Config: a, Steps: 20, StepTime: 0.1, Progress: 60},
	}
	for _, c := range []struct {
		name   string
		policy string
		now    Spec
		forced bool
		want   predict.Candidate
		reason string // in the decision's reason
	}{
		{"nothing changed: stay", "full", spec(spot, a, b), false, a, "re-chosen over the offers now"},
		{"nothing changed, pre-empted: a again, on new machines", "full", spec(spot, a, b), true, a, "must relaunch"},
		{"a's spot market went: b", "full", spec(aOnDemand, a, b), false, b, "re-chosen"},
		{"a's spot market went, pre-empted: b", "full", spec(aOnDemand, a, b), true, b, "must relaunch"},
		{"a withdrawn, pre-empted: b", "full", spec(spot, b), true, b, "must relaunch"},
		{"scavenger: a's spot market went", "scavenger", spec(aOnDemand, a, b), false, b, "re-chosen"},
		{"adaptive: a's spot market went", "adaptive", spec(aOnDemand, a, b), false, b, "re-chosen"},
		{"fixed: stays", "fixed", spec(aOnDemand, a, b), true, a, "fixed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := New(c.policy, spec(spot, a, b))
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range history {
				if _, err := p.Observe(o); err != nil {
					t.Fatal(err)
				}
			}
			d, err := p.Rechoose(c.now, c.forced)
			if err != nil {
				t.Fatal(err)
			}
			if d.Config != c.want || !strings.Contains(d.Reason, c.reason) {
				t.Errorf("re-chose %s (%s), want %s with %q", d.Config, d.Reason, c.want, c.reason)
			}
			if c.policy != "fixed" && (d.Chosen < 0 || d.Predictions[d.Chosen].Candidate != d.Config) {
				t.Errorf("decision without its prediction: %+v", d)
			}
			if c.forced && c.policy != "fixed" {
				for _, pr := range d.Predictions {
					if pr.SwitchS == 0 {
						t.Errorf("forced re-choice: %s pays no relaunch", pr.Candidate)
					}
				}
			}
		})
	}
}

// TestRechooseBeforeAReport: nothing observed, nothing to re-choose on.
func TestRechooseBeforeAReport(t *testing.T) {
	s := synthSpec(objective.Time, 1e4)
	p, err := New("scavenger", s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Rechoose(s, true); !errors.Is(err, ErrNotObserved) {
		t.Errorf("err = %v, want ErrNotObserved", err)
	}
}

// TestRechooseKeepsTheSpace: after a re-choice the policy decides over the
// new space at its next report (a withdrawn type is never chosen again).
func TestRechooseKeepsTheSpace(t *testing.T) {
	a := predict.Candidate{Type: "a", Nodes: 1, Workers: 1, Batch: 32}
	b := a
	b.Type = "b"
	s := Spec{Candidates: []predict.Candidate{a, b}, Prices: map[string]float64{"a": 0.01, "b": 0.04}, M0: 32, Target: 1e5, Objective: objective.Objective{Kind: objective.Cost}, RelaunchS: 1}
	p, err := New("adaptive", s)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []Observation{
		{ElapsedS: 2, Config: a, Steps: 20, StepTime: 0.1, Progress: 20},
		{ElapsedS: 4, Config: b, Steps: 20, StepTime: 0.05, Progress: 40},
	} {
		if _, err := p.Observe(o); err != nil {
			t.Fatal(err)
		}
	}
	only := s
	only.Candidates = []predict.Candidate{b}
	if d, err := p.Rechoose(only, true); err != nil || d.Config != b {
		t.Fatalf("re-chose %+v, %v", d, err)
	}
	d, err := p.Observe(Observation{ElapsedS: 400, Config: b, Steps: 2000, StepTime: 0.05, Progress: 2040})
	if err != nil || d.Config != b {
		t.Fatalf("next decision %s (%s), %v: want b, the only type offered", d.Config, d.Reason, err)
	}
}
