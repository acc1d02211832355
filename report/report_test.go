package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/optimizer/plot"
	"github.com/scavenger-ml/scavenger/report/reporttest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with the file at path; -update rewrites it.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (rerun with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("output differs from %s (rerun with -update if the change is intended):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

func TestReportFromRecordsGolden(t *testing.T) {
	j, recs, now := reporttest.SyntheticJob()
	rep := Make(j, recs, now)
	if len(rep.Candidates) != 3 || rep.CandidatesStep != 160 {
		t.Errorf("candidates %v of step %d: want the 3 of step 160", rep.Candidates, rep.CandidatesStep)
	}
	if len(rep.PredictedCost) != 1 || abs(rep.PredictedCost[0].V-(50.0/3600*36+0.5)) > 1e-9 {
		t.Errorf("predicted cost %v: want spent at 50 s plus $0.5", rep.PredictedCost)
	}
	if rep.Timeline[1].ModelStepS != 0.3 || rep.Timeline[0].ModelStepS != 0.25 {
		t.Errorf("model step times %v, %v", rep.Timeline[0].ModelStepS, rep.Timeline[1].ModelStepS)
	}
	if n := len(rep.Noise); n < 200 || n > maxNoisePoints {
		t.Errorf("%d noise points", n)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ") // as scavctl writes JSON
	if err := enc.Encode(rep); err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("testdata", "report-synthetic.json"), b.String())

	b.Reset()
	if err := rep.Print(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("testdata", "report-synthetic.txt"), b.String())
}

func TestReportHTMLIsSelfContained(t *testing.T) {
	j, recs, now := reporttest.SyntheticJob()
	rep := Make(j, recs, now)
	panels, err := plot.Panels(rep.Figures())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := rep.HTML(&b, panels); err != nil {
		t.Fatal(err)
	}
	reporttest.CheckHTML(t, b.String(), 8)
}

func TestReportJSONKeepsItsFields(t *testing.T) {
	j, recs, now := reporttest.SyntheticJob()
	b, err := json.Marshal(Make(j, recs, now))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	// The fields scripts read from -o json before the figures came.
	for _, k := range []string{"job", "state", "policy", "objective", "timeline", "decisions", "total_s", "relaunch_s", "cost_usd", "price_usd_per_hour"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report JSON lacks %q", k)
		}
	}
	if d, ok := m["decisions"].(float64); !ok || d != 2 {
		t.Errorf("decisions %v: still a count", m["decisions"])
	}
}

// TestPrintFlagsDoubtfulPredictions: a predicted step time flagged by the
// policy (low-confidence, non-monotone) is printed with its flags, not as a
// fact.
func TestPrintFlagsDoubtfulPredictions(t *testing.T) {
	j, recs, now := reporttest.SyntheticJob()
	j.Decisions[0].PredictedStepS, j.Decisions[0].PredictedFlags = 0.29, []string{"low-confidence"}
	rep := Make(j, recs, now)
	var b bytes.Buffer
	if err := rep.Print(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b.Bytes(), []byte("[low-confidence]")) {
		t.Errorf("flag missing from:\n%s", b.String())
	}
}

// TestReportSaysTheLossTurnedNaN (issue 23): the report names where the
// loss turned NaN.
func TestReportSaysTheLossTurnedNaN(t *testing.T) {
	j := api.Job{ID: "j", State: api.StateSucceeded, BadLoss: &api.BadLoss{Attempt: 1, Step: 51, Value: "NaN"}}
	var b strings.Builder
	if err := Make(j, nil, time.Now()).Print(&b); err != nil {
		t.Fatal(err)
	}
	if want := "Loss: turned NaN at step 51 (attempt 1)"; !strings.Contains(b.String(), want) {
		t.Errorf("report:\n%s\nwant it to say %q", b.String(), want)
	}
}
