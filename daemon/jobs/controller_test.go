package jobs

import (
	"testing"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

func TestRecordCandidates(t *testing.T) {
	preds := func(n int) []predict.Prediction {
		out := make([]predict.Prediction, n)
		for i := range out {
			out[i] = predict.Prediction{Candidate: predict.Candidate{Type: "local", Nodes: 1, Workers: 1, Batch: i + 1},
				StepTime: 0.1, TotalS: float64(100 + i), TotalUSD: float64(i)}
		}
		return out
	}
	for _, c := range []struct {
		name            string
		n, chosen       int
		wantLen         int
		wantChosenBatch int // 0: none marked
	}{
		{"none", 0, -1, 0, 0},
		{"no choice", 3, -1, 3, 0},
		{"all kept", 5, 2, 5, 3},
		{"cut, chosen kept", 100, 90, maxRecordedCandidates, 91},
		{"cut, chosen within", 100, 10, maxRecordedCandidates, 11},
		{"cut, chosen at the edge", 100, maxRecordedCandidates - 1, maxRecordedCandidates, maxRecordedCandidates},
	} {
		got := recordCandidates(preds(c.n), c.chosen)
		if len(got) != c.wantLen {
			t.Errorf("%s: %d candidates, want %d", c.name, len(got), c.wantLen)
		}
		marked := 0
		for _, g := range got {
			if g.Chosen {
				marked++
				if g.Batch != c.wantChosenBatch {
					t.Errorf("%s: chosen batch %d, want %d", c.name, g.Batch, c.wantChosenBatch)
				}
			}
			if g.Type != "local" || g.Workers != 1 || g.TotalS != float64(100+g.Batch-1) || g.TotalUSD != float64(g.Batch-1) || g.StepS != 0.1 {
				t.Errorf("%s: candidate %+v does not carry its prediction", c.name, g)
			}
		}
		if want := min(1, c.wantChosenBatch); marked != want {
			t.Errorf("%s: %d marked chosen, want %d", c.name, marked, want)
		}
	}
}

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
