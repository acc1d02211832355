package report

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/stepstats"
	"github.com/scavenger-ml/scavenger/telemetry"
)

var topNow = time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)

// topFixture is a frame with every kind of row: optimised with a forecast,
// probing, plain running, starting, finished, failed, and a long id.
func topFixture(extra int) TopFrame {
	f := TopFrame{Now: topNow, Node: "gpu-node-07", Interval: 2 * time.Second, Jobs: []TopRow{
		{ID: "resnet50-imagenet-4f9a2c", State: "optimised", Active: true, Workers: 8, Batch: 2048, Step: 123456, SamplesPerS: 15234.5, StepS: 0.1344, Noise: 18234, LeftS: 7384, CostUSD: 412.77, Predicted: true},
		{ID: "bert-5c1d00", State: "probing", Active: true, Workers: 2, Batch: 64, Step: 207, SamplesPerS: 2419, StepS: 0.0265, Noise: 717.3},
		{ID: "cnn-0a0b0c", State: "running", Active: true, Workers: 1, Batch: 32, Step: 12, StepS: 0.0126, CostUSD: 0.0004},
		{ID: "starting-job-aaaaaa-with-a-name-much-longer-than-any-column", State: "starting", Active: true, Workers: 4},
		{ID: "dev-a0f330", State: "succeeded", Workers: 2, Batch: 256, Step: 783, CostUSD: 0.0221},
		{ID: "broken-ffffff", State: "failed", Workers: 2, Batch: 64, Step: 3},
	}}
	for i := 0; i < extra; i++ {
		f.Jobs = append(f.Jobs, TopRow{ID: fmt.Sprintf("old-%06d", i), State: "succeeded", Workers: 1, Batch: 32, Step: int64(100 * (i + 1)), CostUSD: 0.01 * float64(i)})
	}
	return f
}

func TestTopRenderGolden(t *testing.T) {
	for _, c := range []struct {
		name          string
		f             TopFrame
		width, height int
	}{
		{"80x24", topFixture(4), 80, 24},
		{"80x24-overflow", topFixture(40), 80, 24},
		{"80x24-empty", TopFrame{Now: topNow, Node: "n1", Interval: time.Second}, 80, 24},
		{"132x10", topFixture(20), 132, 10},
		{"40x6", topFixture(0), 40, 6},
		{"80x24-gone", func() TopFrame {
			f := topFixture(0)
			f.Gone = topNow.Add(-45 * time.Second)
			f.Note = "scavctl: reconnecting to scavd (/run/scav/api.sock)"
			return f
		}(), 80, 24},
		{"80x24-note", func() TopFrame {
			f := topFixture(0)
			f.Note = "scavctl: list jobs: jobs request: nats: timeout"
			return f
		}(), 80, 24},
	} {
		t.Run(c.name, func(t *testing.T) {
			lines := RenderTop(c.f, c.width, c.height)
			checkFrame(t, lines, c.width, c.height)
			golden(t, filepath.Join("testdata", "top-"+c.name+".txt"), strings.Join(lines, "\n")+"\n")
		})
	}
}

// checkFrame checks that lines fit width×height and are printable ASCII.
func checkFrame(t *testing.T, lines []string, width, height int) {
	t.Helper()
	if len(lines) > height {
		t.Errorf("%d lines for a height of %d", len(lines), height)
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > width {
			t.Errorf("line %d has %d characters for a width of %d: %q", i, n, width, l)
		}
		for _, r := range l {
			if r < ' ' || r > '~' {
				t.Errorf("line %d has %q: top writes ASCII only", i, r)
				break
			}
		}
	}
}

func TestTopTracker(t *testing.T) {
	tr := NewTopTracker()
	rec := func(step int64, rank int, tm, dt, local, avg float64) telemetry.StepRecord {
		return telemetry.StepRecord{Job: "j", Rank: rank, World: 2, Step: step, Time: tm, Seconds: dt, GlobalBatch: 64, LocalBatch: 32,
			LocalSqr: ptr(local), AvgSqr: ptr(avg)}
	}
	for s := int64(1); s <= 30; s++ {
		tr.Add(rec(s, 0, float64(s)*0.5, 0.5, 3, 2), 64)
		tr.Add(rec(s, 1, float64(s)*0.5, 9, 3, 2), 64) // rank 1 does not count
	}
	tr.Add(rec(10, 0, 99, 100, 3, 2), 64) // a replayed step does not count
	j := tr.jobs["j"]
	if j.Step != 30 {
		t.Errorf("step %d, want 30", j.Step)
	}
	if r := j.Rate.PerSecond(); r != 128 {
		t.Errorf("rate %v samples/s, want 64 per 0.5 s = 128", r)
	}
	if m := stepstats.Median(j.Dts); m != 0.5 {
		t.Errorf("median step time %v, want 0.5", m)
	}
	// Local 3, averaged 2 over 2 gradients of 32 at M0 = 64 (scale 1):
	// |G|² = (2·2−3)/1 = 1 and tr Σ = (3−2)·1/1 = 1, so B_noise = 64·1/1.
	if n := j.NoiseScale(); abs(n-64) > 1e-9 {
		t.Errorf("noise scale %v, want 64", n)
	}
	// A relaunch starts the speed over.
	next := rec(31, 0, 40, 2, 3, 2)
	next.Attempt = 2
	tr.Add(next, 64)
	if j.Rate.PerSecond() != 0 || stepstats.Median(j.Dts) != 2 || j.Step != 31 {
		t.Errorf("after a relaunch: rate %v, step time %v, step %d; want no rate yet, 2 s, 31", j.Rate.PerSecond(), stepstats.Median(j.Dts), j.Step)
	}
	if tr.jobs["other"] != nil {
		t.Error("a job without records is tracked")
	}
}

func TestTopRowAfterARelaunch(t *testing.T) {
	tr := NewTopTracker()
	for s := int64(1); s <= 10; s++ {
		tr.Add(telemetry.StepRecord{Job: "j", Attempt: 1, World: 1, Step: s, Time: float64(s), Seconds: 1, GlobalBatch: 32, LocalBatch: 32}, 32)
	}
	job := api.Job{ID: "j", State: api.StateRunning, Config: plugins.Config{Workers: 1, GlobalBatch: 32},
		Attempts: []api.Attempt{{Attempt: 1, Config: plugins.Config{Workers: 1, GlobalBatch: 32}}}}
	if r := BuildTopFrame([]api.Job{job}, tr, nil, topNow).Jobs[0]; r.SamplesPerS != 32 || r.StepS != 1 {
		t.Fatalf("attempt 1: %v samples/s, step %v s; want 32 and 1", r.SamplesPerS, r.StepS)
	}
	// Relaunched on 4 workers: the record has attempt 2, no step of it yet.
	job.Config = plugins.Config{Workers: 4, GlobalBatch: 128}
	job.Attempts = append(job.Attempts, api.Attempt{Attempt: 2, Config: job.Config})
	if r := BuildTopFrame([]api.Job{job}, tr, nil, topNow).Jobs[0]; r.SamplesPerS != 0 || r.StepS != 0 || r.Step != 10 {
		t.Errorf("attempt 2 before its first step: %v samples/s, step %v s at step %d; want no speed (the last one's is not this configuration's), step 10",
			r.SamplesPerS, r.StepS, r.Step)
	}
}

func TestTopBuildFrame(t *testing.T) {
	started := topNow.Add(-time.Hour)
	ended := topNow.Add(-10 * time.Minute)
	jobs := []api.Job{
		{ID: "done-old", State: api.StateSucceeded, Created: topNow.Add(-3 * time.Hour), Started: &started, Ended: &started,
			Config: plugins.Config{Workers: 1, GlobalBatch: 32}},
		{ID: "done-new", State: api.StateFailed, Created: topNow.Add(-2 * time.Hour), Started: &started, Ended: &ended,
			Config: plugins.Config{Workers: 1, GlobalBatch: 32}, Optimize: api.Optimize{PriceUSDPerHour: 6}},
		{ID: "run-b", State: api.StateRunning, Phase: "optimised", Created: topNow.Add(-time.Minute), Started: &started,
			Config: plugins.Config{Workers: 2, GlobalBatch: 128}, Optimize: api.Optimize{Policy: "scavenger", PriceUSDPerHour: 3.6},
			Decisions: []api.Decision{
				{Time: topNow.Add(-30 * time.Minute), PredictedS: 600, PredictedUSD: 1},               // stale: superseded
				{Time: topNow.Add(-10 * time.Minute), PredictedS: 1800, PredictedUSD: 1.8},            // 1200 s left of 1800
				{Time: topNow.Add(-5 * time.Minute), Reason: "probe", To: plugins.Config{Workers: 1}}, // no forecast
			}},
		{ID: "run-a", State: api.StateStarting, Created: topNow.Add(-2 * time.Minute), Config: plugins.Config{Workers: 4, GlobalBatch: 64}},
	}
	f := BuildTopFrame(jobs, NewTopTracker(), nil, topNow)
	var order []string
	for _, r := range f.Jobs {
		order = append(order, r.ID)
	}
	if got := strings.Join(order, " "); got != "run-a run-b done-new done-old" {
		t.Errorf("order %q: want the active ones oldest first, then the finished newest first", got)
	}
	b := f.Jobs[1]
	if b.State != "optimised" || !b.Predicted || b.LeftS != 1200 {
		t.Errorf("run-b: %+v: want phase optimised, 1200 s left", b)
	}
	// An hour at $3.60/h spent, plus 1200/1800 of the predicted $1.80.
	if want := 3.6 + 1.2; abs(b.CostUSD-want) > 1e-9 {
		t.Errorf("run-b cost %v, want %v", b.CostUSD, want)
	}
	if d := f.Jobs[2]; d.Active || d.Predicted || abs(d.CostUSD-5) > 1e-9 {
		t.Errorf("done-new: %+v: want 50 min at $6/h = $5, no forecast", d)
	}
	if a := f.Jobs[0]; a.CostUSD != 0 || a.State != "starting" {
		t.Errorf("run-a: %+v", a)
	}
}

func TestTopTextFormats(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{siText(0), "-"}, {siText(3.14), "3.1"}, {siText(950), "950"}, {siText(12345), "12.3k"}, {siText(4.5e6), "4.5M"},
		{msText(0.0126), "12.6ms"}, {msText(0.345), "345ms"}, {msText(1.234), "1.23s"}, {msText(75), "1m15s"},
		{durText(42), "42s"}, {durText(185), "3m05s"}, {durText(7800), "2h10m"}, {durText(3*86400 + 4*3600), "3d04h"},
		{clip("abcdef", 4), "abc+"}, {clip("abc", 4), "abc"},
		{costText(TopRow{CostUSD: 0.5, Active: true, Predicted: true}), "~$0.50"}, {costText(TopRow{CostUSD: 1234}), "$1234"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestTopShowsIntervals: with room, the time and cost left show their 90 %
// intervals from the forecast; past the forecast, only a lower bound.
func TestTopShowsIntervals(t *testing.T) {
	started := topNow.Add(-time.Minute)
	dec := api.Decision{Time: topNow.Add(-time.Minute), Step: 0, PredictedStepS: 1, PredictedSteps: 600, PredictedS: 600, PredictedLoS: 480, PredictedHiS: 900,
		PredictedUSD: 0.6, PredictedUSDLo: 0.48, PredictedUSDHi: 0.9}
	tr := NewTopTracker()
	for s := int64(1); s <= 60; s++ {
		tr.Add(telemetry.StepRecord{Job: "j", Attempt: 1, World: 1, Step: s, Time: float64(s), Seconds: 1, GlobalBatch: 32, LocalBatch: 32}, 32)
	}
	job := api.Job{ID: "j", State: api.StateRunning, Started: &started, Config: plugins.Config{Workers: 1, GlobalBatch: 32},
		Optimize: api.Optimize{Policy: "scavenger", PriceUSDPerHour: 3.6}, Decisions: []api.Decision{dec},
		Attempts: []api.Attempt{{Attempt: 1, Config: plugins.Config{Workers: 1, GlobalBatch: 32}}}}
	f := BuildTopFrame([]api.Job{job}, tr, nil, topNow)
	text := strings.Join(RenderTop(f, 132, 0), "\n")
	// 540 steps left at 1 s: 9 min, 7-14 min; $0.06 spent and $0.54 (0.43..0.81) to go.
	if !strings.Contains(text, "7m-14m") || !strings.Contains(text, "$0.492-0.87") {
		t.Errorf("no intervals:\n%s", text)
	}
	if narrow := strings.Join(RenderTop(f, 80, 0), "\n"); !strings.Contains(narrow, "~9m00s") {
		t.Errorf("80 columns: want the point\n%s", narrow)
	}
	job.Decisions[0].PredictedSteps = 30 // the forecast's steps ran out: the job goes on
	f = BuildTopFrame([]api.Job{job}, tr, nil, topNow)
	if text := strings.Join(RenderTop(f, 132, 0), "\n"); !strings.Contains(text, ">1s") {
		t.Errorf("past the forecast:\n%s", text)
	}
}

// TestTopShowsNoStaleSpeed (issue 21): a job whose newest step is older
// than a few of its steps (and 10 s) shows no speed, and one its daemon
// marked stalled shows so.
func TestTopShowsNoStaleSpeed(t *testing.T) {
	now := time.Now()
	tr := NewTopTracker()
	for s := int64(1); s <= 10; s++ {
		at := now.Add(-time.Minute + time.Duration(s)*time.Second)
		tr.Add(telemetry.StepRecord{Job: "j", Attempt: 1, World: 1, Step: s, Time: float64(at.UnixNano()) / 1e9, Seconds: 1, GlobalBatch: 32, LocalBatch: 32}, 32)
	}
	job := api.Job{ID: "j", State: api.StateRunning, Attempt: 1, Config: plugins.Config{Workers: 1, GlobalBatch: 32},
		Attempts: []api.Attempt{{Attempt: 1, Config: plugins.Config{Workers: 1, GlobalBatch: 32}}}}
	if r := BuildTopFrame([]api.Job{job}, tr, nil, now).Jobs[0]; r.SamplesPerS != 0 || r.StepS != 0 || r.Step != 10 {
		t.Errorf("newest step 50 s old: %v samples/s, step %v s; want no speed, step 10", r.SamplesPerS, r.StepS)
	}
	if r := BuildTopFrame([]api.Job{job}, tr, nil, now.Add(time.Minute)).Jobs[0]; r.SamplesPerS != 0 {
		t.Errorf("a minute later: %v samples/s, want none", r.SamplesPerS)
	}
	job.Stalled = &api.Stall{Since: now.Add(-50 * time.Second), Step: 10}
	if r := BuildTopFrame([]api.Job{job}, tr, nil, now).Jobs[0]; r.State != "stalled" {
		t.Errorf("state %q, want stalled", r.State)
	}
	job.Stalled, job.BadLoss = nil, &api.BadLoss{Attempt: 1, Step: 9, Value: "NaN"}
	if r := BuildTopFrame([]api.Job{job}, tr, nil, now).Jobs[0]; r.State != "loss-NaN" {
		t.Errorf("state %q, want loss-NaN", r.State)
	}
}

// TestTopShortensIDsToUniquePrefixes: at 80 columns the JOB column is 15
// wide; two jobs of one name, whose ids differ only past it, still show
// apart, each as a prefix of its id that scavctl takes for the job, and an
// id whose unique part lies far beyond the column keeps its random tail.
func TestTopShortensIDsToUniquePrefixes(t *testing.T) {
	rows := []TopRow{
		{ID: "resumable_cnn-7687af"}, {ID: "resumable_cnn-12ab34"}, {ID: "cnn-0a0b0c"},
		{ID: "a-very-long-experiment-name-000001"}, {ID: "a-very-long-experiment-name-000002"},
	}
	got := shortIDs(rows, 15)
	want := []string{"resumable_cnn-7", "resumable_cnn-1", "cnn-0a0b0c", "a-very-+-000001", "a-very-+-000002"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("id %q shows as %q, want %q", rows[i].ID, got[i], want[i])
		}
	}
	lines := RenderTop(TopFrame{Jobs: rows}, 80, 24)
	seen := map[string]bool{}
	for _, l := range lines[2 : 2+len(rows)] {
		cell := strings.Fields(l)[0]
		if seen[cell] {
			t.Errorf("two rows show %q:\n%s", cell, strings.Join(lines, "\n"))
		}
		seen[cell] = true
	}
}
