package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/scavenger-ml/scavenger/optimizer/plot"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

func TestReportFormat(t *testing.T) {
	for _, c := range []struct {
		format, output string
		outputSet      bool
		want           string
		err            bool
	}{
		{"", "table", false, "text", false},
		{"", "json", true, "json", false},
		{"", "table", true, "text", false},
		{"html", "table", false, "html", false},
		{"svg", "table", false, "svg", false},
		{"png", "table", false, "png", false},
		{"json", "json", true, "json", false},
		{"html", "json", true, "", true},
		{"pdf", "table", false, "", true},
		{"", "yaml", true, "", true},
	} {
		got, err := reportFormat(c.format, c.output, c.outputSet)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("--format %q -o %q (set %v): %q, %v; want %q, error %v", c.format, c.output, c.outputSet, got, err, c.want, c.err)
		}
	}
}

// syntheticJob is a job that probed two configurations and chose the second
// from three candidates; records are rank 0's steps with gradient norms.
func syntheticJob() (api.Job, []telemetry.StepRecord, time.Time) {
	t0 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	p := func(t time.Time) *time.Time { return &t }
	c1, c2 := plugins.Config{Workers: 1, GlobalBatch: 32}, plugins.Config{Workers: 2, GlobalBatch: 128}
	j := api.Job{
		ID: "syn-000001", State: api.StateSucceeded, Config: c2, Created: t0, Started: p(t0), Ended: p(at(100)),
		Optimize: api.Optimize{Policy: "scavenger", Objective: "time", PriceUSDPerHour: 36},
		Attempts: []api.Attempt{
			{Attempt: 1, Config: c1, Started: at(0.5), Ended: p(at(30)), FirstStep: 1, LastStep: 100, EndReason: "moved: probe",
				Move: &api.MoveTiming{Checkpoint: 0.5, Exit: 0.1, Start: 0.2, FirstStep: 1.2}},
			{Attempt: 2, Config: c2, Started: at(32), Ended: p(at(100)), FirstStep: 101, LastStep: 300, EndReason: "succeeded"},
		},
		Decisions: []api.Decision{
			{Time: at(20), Step: 60, From: c1, To: c2, Reason: "probe 2 of 2", Phase: "probing"},
			{Time: at(50), Step: 160, From: c2, To: c2, Reason: "least time", Phase: "optimised", PredictedStepS: 0.3, PredictedS: 50, PredictedUSD: 0.5,
				Alternatives: 3, Candidates: []api.CandidatePrediction{
					{Type: "local", Workers: 1, Batch: 32, StepS: 0.25, TotalS: 120, TotalUSD: 1.2},
					{Type: "local", Workers: 2, Batch: 64, StepS: 0.2, TotalS: 70, TotalUSD: 0.7},
					{Type: "local", Workers: 2, Batch: 128, StepS: 0.3, TotalS: 50, TotalUSD: 0.5, Chosen: true},
				}},
		},
	}
	var recs []telemetry.StepRecord
	for s := int64(1); s <= 300; s++ {
		cfg, attempt, ts := c1, 1, 0.5+float64(s)*0.29
		if s > 100 {
			cfg, attempt, ts = c2, 2, 32+float64(s-100)*0.34
		}
		recs = append(recs, telemetry.StepRecord{Job: j.ID, Attempt: attempt, Rank: 0, World: cfg.Workers, Step: s, Time: float64(t0.UnixNano())/1e9 + ts,
			Seconds: 0.25 + 0.05*float64(attempt-1), GlobalBatch: cfg.GlobalBatch, LocalBatch: cfg.LocalBatch(), Count: 2, Biased: attempt == 1,
			LocalSqr: f64(3 + float64(s%7)/10), AvgSqr: f64(2)})
	}
	return j, recs, at(200)
}

func TestReportFromRecordsGolden(t *testing.T) {
	j, recs, now := syntheticJob()
	rep := makeReport(j, recs, now)
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
	enc := jsonIndent(&b)
	if err := enc.Encode(rep); err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("testdata", "report-synthetic.json"), b.String())

	b.Reset()
	if err := rep.print(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("testdata", "report-synthetic.txt"), b.String())
}

func TestReportHTMLIsSelfContained(t *testing.T) {
	j, recs, now := syntheticJob()
	rep := makeReport(j, recs, now)
	panels, err := plot.Panels(rep.figures())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := rep.html(&b, panels); err != nil {
		t.Fatal(err)
	}
	checkReportHTML(t, b.String(), 5)
}

// checkReportHTML checks an HTML report: figures inline, tables, nothing fetched.
func checkReportHTML(t *testing.T, page string, figures int) {
	t.Helper()
	if n := strings.Count(page, "<svg"); n != figures {
		t.Errorf("%d inline SVG figures, want %d", n, figures)
	}
	if strings.Contains(page, "<?xml") {
		t.Error("an XML prolog inside the HTML")
	}
	for _, bad := range []string{"src=", "<link", "<script", "url(", "@import"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page refers to something outside it: %q", bad)
		}
	}
	for _, want := range []string{"<h2>Attempts</h2>", "<h2>Decisions</h2>", "Candidates of the decision", "</html>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

func TestReportJSONKeepsItsFields(t *testing.T) {
	j, recs, now := syntheticJob()
	b, err := json.Marshal(makeReport(j, recs, now))
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
