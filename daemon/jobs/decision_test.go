package jobs

import (
	"testing"

	"github.com/scavenger-ml/scavenger/api"
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
