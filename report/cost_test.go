package report

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
)

// TestBilledOf: a job of two attempts billed $0.03 and $0.05; a decision
// during the second attempt, halfway through it, predicted $0.045 more: it
// had spent $0.03 + $0.025, so it predicted $0.10 in all against the $0.08
// billed (+25 %).
func TestBilledOf(t *testing.T) {
	t0 := time.Unix(1000, 0).UTC()
	at := func(s int) *time.Time { v := t0.Add(time.Duration(s) * time.Second); return &v }
	j := api.Job{Started: at(0), Cost: &api.Cost{USD: 0.08, BilledSeconds: 300},
		Attempts: []api.Attempt{
			{Attempt: 1, Config: plugins.Config{Workers: 1, GlobalBatch: 32, MachineType: "a", Market: "spot"}, Ended: at(100), Cost: &api.Cost{USD: 0.03}},
			{Attempt: 2, Config: plugins.Config{Workers: 2, GlobalBatch: 64, MachineType: "b", Market: "on-demand"}, Ended: at(300), Cost: &api.Cost{USD: 0.05}},
		},
		Decisions: []api.Decision{{Time: *at(200), Step: 50, To: plugins.Config{Workers: 2, GlobalBatch: 64, MachineType: "b"}, PredictedUSD: 0.045}, {Time: *at(250)}},
	}
	b := BilledOf(j)
	if b == nil || len(b.Attempts) != 2 || len(b.Checks) != 1 {
		t.Fatalf("BilledOf = %+v", b)
	}
	c := b.Checks[0]
	if math.Abs(c.SpentUSD-0.055) > 1e-12 || math.Abs(c.PredictedUSD-0.1) > 1e-12 || math.Abs(c.ErrorPct-25) > 1e-9 || c.To != "2 x b, batch 64" {
		t.Errorf("check %+v: want spent 0.055, predicted 0.1, +25 %%", c)
	}
	if got := SpentAt(j, *at(50)); math.Abs(got-0.015) > 1e-12 {
		t.Errorf("SpentAt(50 s) = %g, want half of the first attempt's 0.03", got)
	}
	// A decision that kept what had been spent (the charges' word, with
	// the minimum of the first attempt's machine, billed in whole when
	// it ended) is held to that, not to the attempt's bill spread over
	// its time.
	j.Decisions[0].SpentUSD = 0.065
	if c := BilledOf(j).Checks[0]; math.Abs(c.SpentUSD-0.065) > 1e-12 || math.Abs(c.PredictedUSD-0.11) > 1e-12 {
		t.Errorf("check %+v: want spent 0.065 (the decision's), predicted 0.11", c)
	}
	var out bytes.Buffer
	if err := b.Print(&out); err != nil || !strings.Contains(out.String(), "+25.0%") || !strings.Contains(out.String(), "on-demand") {
		t.Errorf("Print: %v\n%s", err, out.String())
	}
	if BilledOf(api.Job{}) != nil {
		t.Error("a job without a bill has one")
	}
}
