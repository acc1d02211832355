// Package reporttest owns what the tests of package report and of
// `scavctl report` share: a synthetic job to report on, and the check that
// an HTML report stands on its own.
package reporttest

import (
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// SyntheticJob is a job that probed two configurations and chose the
// second from three candidates, rank 0's step records with gradient norms
// (the first attempt's from the difference estimator) and losses, and a
// time after it ended.
func SyntheticJob() (api.Job, []telemetry.StepRecord, time.Time) {
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
		local := 3 + float64(s%7)/10
		avg := 2.0
		loss := 2.3/(1+float64(s)/100) + float64(s%5)/50
		recs = append(recs, telemetry.StepRecord{Job: j.ID, Attempt: attempt, Rank: 0, World: cfg.Workers, Step: s, Time: float64(t0.UnixNano())/1e9 + ts,
			Seconds: 0.25 + 0.05*float64(attempt-1), GlobalBatch: cfg.GlobalBatch, LocalBatch: cfg.LocalBatch(), Count: 2, Biased: attempt == 1,
			LocalSqr: &local, AvgSqr: &avg, Loss: &loss})
	}
	return j, recs, at(200)
}

// CheckHTML checks an HTML report page: figures SVG figures inline, its
// tables, and nothing it would fetch.
func CheckHTML(t testing.TB, page string, figures int) {
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
	for _, want := range []string{"<h2>Attempts</h2>", "<h2>Decisions</h2>", "<h2>Predicted time to finish</h2>", "Candidates of the decision", "</html>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// CloudJob is SyntheticJob as a cloud job (launcher cloudvm): its attempts
// ran on machine types (loc.half, then loc.full on spot) that a bill of
// $0.00067 paid for, with no price set; its candidates name their machine
// types, two of them the same workers and batch on either type.
func CloudJob() (api.Job, []telemetry.StepRecord, time.Time) {
	j, recs, now := SyntheticJob()
	j.ID, j.Launcher = "cloud-000001", "cloudvm"
	j.Optimize.PriceUSDPerHour, j.Optimize.Types = 0, []string{"loc.half", "loc.full"}
	half, full := "loc.half", "loc.full"
	j.Attempts[0].Config.MachineType = half
	j.Attempts[1].Config.MachineType, j.Attempts[1].Config.Market = full, plugins.MarketSpot
	j.Config = j.Attempts[1].Config
	j.Attempts[0].Cost = &api.Cost{InstanceSeconds: 60, BilledSeconds: 60, USD: 0.00017}
	j.Attempts[1].Cost = &api.Cost{InstanceSeconds: 70, BilledSeconds: 70, USD: 0.0005}
	j.Cost = &api.Cost{InstanceSeconds: 130, BilledSeconds: 130, USD: 0.00067}
	for i := range j.Decisions {
		d := &j.Decisions[i]
		d.From.MachineType, d.To.MachineType, d.To.Market = half, full, plugins.MarketSpot
		if i > 0 {
			d.From = d.To
		}
		d.PredictedUSD = 0.0004
		for k := range d.Candidates {
			d.Candidates[k].Type, d.Candidates[k].TotalUSD = half, d.Candidates[k].TotalUSD/1000
		}
		if len(d.Candidates) > 0 {
			d.Candidates[2].Type = full
			d.Candidates = append(d.Candidates, api.CandidatePrediction{Type: half, Workers: 2, Batch: 128, StepS: 0.35, TotalS: 60, TotalUSD: 0.0003})
		}
	}
	for i := range recs {
		recs[i].Job = j.ID
	}
	return j, recs, now
}
