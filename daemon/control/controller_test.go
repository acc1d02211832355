package control

import (
	"testing"

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
