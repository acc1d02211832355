package jobs

import (
	"testing"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
)

func TestDecidedKeepsTheLatestCandidatesOnly(t *testing.T) {
	var j api.Job
	with := func(step int64) api.Decision {
		return api.Decision{Step: step, Phase: api.PhaseOptimised, Candidates: []api.CandidatePrediction{{Workers: 1, Batch: 32, Chosen: true}}}
	}
	addDecision(&j, with(10))
	addDecision(&j, api.Decision{Step: 20, Phase: api.PhaseProbing})
	addDecision(&j, with(30))
	addDecision(&j, api.Decision{Step: 40, Phase: api.PhaseProbing})
	if len(j.Decisions) != 4 || j.Phase != api.PhaseProbing {
		t.Fatalf("decisions %+v", j.Decisions)
	}
	for _, d := range j.Decisions {
		if has := len(d.Candidates) > 0; has != (d.Step == 30) {
			t.Errorf("decision at step %d keeps %d candidates: want them on step 30's only", d.Step, len(d.Candidates))
		}
	}
}

// TestDecisionWordsShowCostOnlyWithOne: a decision is recorded in plain
// English (what and why); its predicted cost, made at a placeholder price
// when the job has none, appears only for a job with a price or a bill.
func TestDecisionWordsShowCostOnlyWithOne(t *testing.T) {
	d := api.Decision{Phase: api.PhaseOptimised, From: plugins.Config{Workers: 1, GlobalBatch: 64}, To: plugins.Config{Workers: 2, GlobalBatch: 128},
		PredictedS: 190, PredictedUSD: 0.03, Reason: "least time: local:1:2:128"}
	var unpriced, priced api.Job
	priced.Optimize.PriceUSDPerHour = 2
	for _, c := range []struct {
		job  *api.Job
		want string
	}{
		{&unpriced, "moving to 2 workers × batch 128: predicted to finish in ~3 min"},
		{&priced, "moving to 2 workers × batch 128: predicted to finish in ~3 min for ~$0.03"},
	} {
		got := addDecision(c.job, d)
		if got.Words != c.want || c.job.Decisions[0].Words != c.want || got.Reason != d.Reason {
			t.Errorf("price %v: words %q (recorded %q), reason %q; want %q and the policy's reason kept", c.job.Optimize.PriceUSDPerHour, got.Words, c.job.Decisions[0].Words, got.Reason, c.want)
		}
	}
}
