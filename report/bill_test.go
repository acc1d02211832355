package report

import (
	"math"
	"testing"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/report/reporttest"
)

// TestAttemptCosts: at $36/h the synthetic job's 100 s cost $1: its first
// attempt until the second started (32 s, the relaunch included), the
// second the rest; a billed job's attempts cost their bills; without a
// price nothing.
func TestAttemptCosts(t *testing.T) {
	j, recs, now := reporttest.SyntheticJob()
	rep := Make(j, recs, now)
	got := rep.AttemptCosts()
	if len(got) != 2 || math.Abs(got[0]-0.32) > 1e-9 || math.Abs(got[1]-0.68) > 1e-9 || math.Abs(got[0]+got[1]-rep.CostUSD) > 1e-9 {
		t.Errorf("priced: %v (total %g), want [0.32 0.68]", got, rep.CostUSD)
	}
	j.Cost = &api.Cost{USD: 0.08}
	j.Attempts[0].Cost, j.Attempts[1].Cost = &api.Cost{USD: 0.03}, &api.Cost{USD: 0.05}
	if got := Make(j, recs, now).AttemptCosts(); len(got) != 2 || got[0] != 0.03 || got[1] != 0.05 {
		t.Errorf("billed: %v, want [0.03 0.05]", got)
	}
	j.Cost, j.Optimize.PriceUSDPerHour = nil, 0
	if got := Make(j, recs, now).AttemptCosts(); len(got) != 2 || got[0] != 0 || got[1] != 0 {
		t.Errorf("no price: %v, want zeros", got)
	}
}
