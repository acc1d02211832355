package control

import (
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
)

// TestCloudSpecPricesAndBills: each allowed type is priced in the market
// the job may buy (spot when allowed and offered), types over the cap are
// left out, and the providers' minimum bills reach the policy.
func TestCloudSpecPricesAndBills(t *testing.T) {
	o := api.Optimize{Policy: "adaptive", Objective: "cost", MinWorkers: 1, MaxWorkers: 2, MinBatch: 32, MaxBatch: 64,
		TargetSamples: 1 << 16, Spot: true, MaxPriceUSD: 0.5}
	offers := []plugins.Offer{
		{Type: "half", Slots: 1, OnDemandUSD: 0.1, SpotUSD: 0.04, MinimumBillS: 60},
		{Type: "full", Slots: 2, OnDemandUSD: 0.2},
		{Type: "huge", Slots: 8, OnDemandUSD: 3},
	}
	cl, err := CloudSpec(o, plugins.Config{Workers: 1, GlobalBatch: 32}, offers)
	if err != nil {
		t.Fatal(err)
	}
	if p := cl.Spec.Prices; p["half"] != 0.04 || p["full"] != 0.2 || p["huge"] != 0 {
		t.Errorf("prices %v: want half at spot, full on demand, huge over the cap left out", p)
	}
	if cl.Markets["half"] != plugins.MarketSpot || cl.Markets["full"] != plugins.MarketOnDemand {
		t.Errorf("markets %v", cl.Markets)
	}
	if b := cl.Spec.MinimumBillS; b["half"] != 60 || b["full"] != 0 {
		t.Errorf("minimum bills %v: want half's 60 s, none for full", b)
	}
	for _, c := range cl.Spec.Candidates {
		if c.Type == "huge" || c.Batch%c.Workers != 0 || c.Type == "full" && c.Nodes != 1 {
			t.Errorf("candidate %+v", c)
		}
	}
}

// TestCheckFindsWhatNeedsTheOptimizerInItsPlace: what api cannot check by
// itself (a policy without a target, a step regex that does not parse) is
// found, among api's own problems in the order they always came in.
func TestCheckFindsWhatNeedsTheOptimizerInItsPlace(t *testing.T) {
	req := api.RunRequest{Command: []string{"python3", "train.py"}, Config: plugins.Config{Workers: 1, GlobalBatch: 32},
		Optimize: api.Optimize{Policy: "adaptive", MinWorkers: 1, MaxWorkers: 2}, StepRegex: "step (", Allocation: "4711"}
	want := []string{"needs a target", "step regex", "allocation \"4711\""}
	err := Check(req)
	if err == nil {
		t.Fatalf("Check = nil, want %q", want)
	}
	got := strings.Split(err.Error(), "\n")
	if len(got) != len(want) {
		t.Fatalf("Check = %q, want %d problems: %q", got, len(want), want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("problem %d = %q, want %q", i, got[i], w)
		}
	}
	if err := req.Validate(); err == nil || strings.Contains(err.Error(), "target") || strings.Contains(err.Error(), "regex") {
		t.Errorf("api's Validate = %v, want the allocation's problem only", err)
	}
	req.Optimize.TargetSamples, req.StepRegex, req.Allocation = 1000, `step (\d+)`, ""
	if err := Check(req); err != nil {
		t.Errorf("Check of a good request = %v", err)
	}
}

// TestSpecCountsTheWorkAtTheBaseBatch: the policy's M0 is the job's base
// batch, not the batch it starts at, and its target the work in M0 steps.
func TestSpecCountsTheWorkAtTheBaseBatch(t *testing.T) {
	o := api.Optimize{Policy: "adaptive", MinBatch: 32, MaxBatch: 128, TargetSamples: 32 * 1000}
	for _, c := range []struct {
		base, start int
		m0          float64
	}{{0, 32, 32}, {0, 128, 128}, {32, 128, 32}} {
		o.BaseBatch = c.base
		spec, _, err := Spec(o, plugins.Config{Workers: 1, GlobalBatch: c.start})
		if err != nil {
			t.Fatal(err)
		}
		if spec.M0 != c.m0 || spec.Target != 32*1000/c.m0 {
			t.Errorf("base %d, start %d: M0 %g, target %g; want M0 %g, target %g", c.base, c.start, spec.M0, spec.Target, c.m0, 32*1000/c.m0)
		}
	}
}
