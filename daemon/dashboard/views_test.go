package dashboard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/report"
	"github.com/scavenger-ml/scavenger/report/reporttest"
)

// syntheticView is the job page of report's synthetic job (two attempts,
// the second chosen by a probe and predicted later at 0.3 s a step; three
// candidates) with an output tail.
func syntheticView(t *testing.T, out ...outLine) (api.Job, jobView) {
	t.Helper()
	j, recs, now := reporttest.SyntheticJob()
	rep := report.Make(j, recs, now)
	tr := report.NewTopTracker()
	for _, r := range recs {
		tr.Add(r, report.BaseBatch(j))
	}
	snap := jobSnap{recs: recs, out: out, replayed: true, row: report.BuildTopFrame([]api.Job{j}, tr, nil, now).Jobs[0]}
	return j, buildJobView(j, rep, snap, now)
}

func TestJobViewShowsEachAttemptWithItsDecisionAndPrediction(t *testing.T) {
	_, v := syntheticView(t)
	if len(v.Attempts) != 2 {
		t.Fatalf("%d attempts, want 2", len(v.Attempts))
	}
	first, second := v.Attempts[0], v.Attempts[1]
	if first.Config != "1 worker × batch 32" || first.Decision != "the first launch, as submitted" || first.Ended != "moved" {
		t.Errorf("first attempt %+v", first)
	}
	if second.Config != "2 workers × batch 128" || second.Decision != "probing: probe 2 of 2" {
		t.Errorf("second attempt's decision %q (%s)", second.Decision, second.Config)
	}
	if second.Predicted != "300.0 ms (predicted later)" || second.Measured != "300.0 ms" || second.Diff != "+0%" {
		t.Errorf("second attempt: predicted %q, measured %q, error %q", second.Predicted, second.Measured, second.Diff)
	}
	if second.Relaunch != "2.0 s ($0.02)" || first.Cost != "$0.32" || second.Cost != "$0.68" {
		t.Errorf("relaunch %q, costs %q %q", second.Relaunch, first.Cost, second.Cost)
	}
	if len(v.Decisions) != 2 || !v.Decisions[1].Stay || v.Decisions[1].To != "2 workers × batch 128" || v.Decisions[0].Stay || v.Decisions[1].Predicted != "50.0 s to finish, $0.5" {
		t.Errorf("decisions %+v", v.Decisions)
	}
	if v.Bill != "$1 at $36/h" {
		t.Errorf("bill %q", v.Bill)
	}
	if bill, err := mustPages().fragment("job", "job-bill", v); err != nil || !strings.Contains(bill, "#1 $0.32") || !strings.Contains(bill, "#2 $0.68") {
		t.Errorf("bill by attempt: %q %v", bill, err)
	}
	// The candidates by time: the chosen one (also the current
	// configuration) is the fastest and the cheapest, the only one on the front.
	if len(v.Candidates) != 3 || !v.Candidates[0].Chosen || !v.Candidates[0].Current || !v.Candidates[0].Front || v.Candidates[1].Front {
		t.Errorf("candidates %+v", v.Candidates)
	}
	f := v.Charts.Front
	if f.Chosen != 0 || f.Current != 0 || len(f.Front) != 1 || f.Time[0] != 50 || f.Cost[2] != 1.2 {
		t.Errorf("front %+v", f)
	}
	if len(v.Charts.Marks) != 1 || v.Charts.Marks[0].T != 32 || len(v.Charts.Rate[0]) == 0 || len(v.Charts.StepTime[1]) != len(v.Charts.Rate[1]) {
		t.Errorf("charts: marks %+v, %d rate points, %d step time points", v.Charts.Marks, len(v.Charts.Rate[0]), len(v.Charts.StepTime[1]))
	}
	if v.LastStep != 300 || v.Cells.Step != "300" {
		t.Errorf("last step %d (%q)", v.LastStep, v.Cells.Step)
	}
}

// TestPagesEscapeEverything: a job name, an output line and a decision's
// reason that hold markup show as text in the page and in its updates.
func TestPagesEscapeEverything(t *testing.T) {
	const evil = `<script>document.title="owned"</script><img src=x onerror=alert(1)>`
	j, recs, now := reporttest.SyntheticJob()
	j.Name, j.Message, j.Decisions[0].Reason = evil, evil, evil
	rep := report.Make(j, recs, now)
	v := buildJobView(j, rep, jobSnap{recs: recs, replayed: true, out: []outLine{{Stream: "stdout", Text: evil}, {Stream: "event", Text: evil}}}, now)
	p := mustPages()
	s := &Server{pages: p}
	u, err := s.fragments("job", v, "job-head", "job-attempts", "job-decisions", "job-output")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, h := range u.HTML {
		b.WriteString(h)
	}
	d := s.data(viewer{owner: alice, csrf: `"><script>`}, "job", "Job "+evil, "/ui/events/job/x", v)
	page, err := p.fragment("job", "page", d)
	if err != nil {
		t.Fatal(err)
	}
	b.WriteString(page)
	all := b.String()
	for _, bad := range []string{"<script>document", "<img src=x", `"><script>`} {
		if strings.Contains(all, bad) {
			t.Errorf("unescaped %q in the page", bad)
		}
	}
	if n := strings.Count(all, "&lt;script&gt;document.title"); n < 6 {
		t.Errorf("the markup shows as text %d times, want it in the name, message, reason, output and event (6+)", n)
	}
	if strings.Count(page, "<script") != 2 {
		t.Errorf("the page has %d scripts, want its two own", strings.Count(page, "<script"))
	}
}

func TestJobsViewFiltersAsScavctlJobs(t *testing.T) {
	now := time.Unix(5000, 0)
	job := func(id, name string, st api.JobState) api.Job {
		return api.Job{ID: id, Name: name, State: st, Created: now, Config: plugins.Config{Workers: 2, GlobalBatch: 64, MachineType: "n2", Market: "spot", Nodes: 2},
			Owner: &alice}
	}
	jobs := []api.Job{job("a-1", "a", api.StateRunning), job("b-1", "b", api.StateSucceeded), job("a-2", "a", api.StateFailed)}
	fr := report.BuildTopFrame(jobs, report.NewTopTracker(), nil, now)
	for _, c := range []struct {
		state, name string
		want        []string
	}{
		{"", "", []string{"a-1", "b-1", "a-2"}}, // as top orders them: the active first
		{"active", "", []string{"a-1"}},
		{"failed", "", []string{"a-2"}},
		{"", "a", []string{"a-1", "a-2"}},
		{"succeeded", "a", nil},
	} {
		v := buildJobsView(jobs, fr, c.state, c.name)
		var got []string
		for _, r := range v.Rows {
			got = append(got, r.ID)
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") || v.Total != 3 || v.Active != 1 {
			t.Errorf("state %q name %q: %v (of %d, %d active), want %v", c.state, c.name, got, v.Total, v.Active, c.want)
		}
	}
	r := buildJobsView(jobs, fr, "", "").Rows[0]
	if r.Config != "n2 (spot) × 2 nodes × 2 workers × batch 64" || r.Owner != "alice" || r.Policy != "-" || r.Cells.Config != "2x64" {
		t.Errorf("row %+v", r)
	}
}

// TestUPlotIsThePinnedFile: the embedded chart library is the file of the
// npm package its VERSION note names.
func TestUPlotIsThePinnedFile(t *testing.T) {
	b, err := fs.ReadFile(assets, "static/uPlot.iife.min.js")
	if err != nil {
		t.Fatal(err)
	}
	note, err := fs.ReadFile(assets, "static/uPlot.VERSION")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if !strings.Contains(string(note), "uPlot.iife.min.js (sha256 "+hex.EncodeToString(sum[:])+")") {
		t.Errorf("uPlot.iife.min.js has sha256 %x, not the one uPlot.VERSION pins", sum)
	}
	if lic, err := fs.ReadFile(assets, "static/uPlot.LICENSE"); err != nil || !strings.Contains(string(lic), "MIT License") {
		t.Errorf("uPlot's licence: %v", err)
	}
}

// TestRunningAttemptShowsItsStepsSoFar: the record has a running attempt's
// last step only once it ends; the page shows the steps its records reached.
func TestRunningAttemptShowsItsStepsSoFar(t *testing.T) {
	j, recs, now := reporttest.SyntheticJob()
	j.State, j.Ended, j.Attempts[1].Ended, j.Attempts[1].LastStep = api.StateRunning, nil, nil, 0
	tr := report.NewTopTracker()
	for _, r := range recs {
		tr.Add(r, report.BaseBatch(j))
	}
	snap := jobSnap{recs: recs, replayed: true, row: report.BuildTopFrame([]api.Job{j}, tr, nil, now).Jobs[0]}
	v := buildJobView(j, report.Make(j, recs, now), snap, now)
	if a := v.Attempts[1]; !a.Current || a.Steps != "101–300" || !v.Active {
		t.Errorf("running attempt %+v (active %v): want steps 101–300", a, v.Active)
	}
}

// TestErrorsHaveTheirStatus: the API's refusals keep theirs; the
// dashboard's own bounds and bad input theirs.
func TestErrorsHaveTheirStatus(t *testing.T) {
	for err, want := range map[error]int{
		&api.Refusal{Status: 403, Msg: "permission denied"}: 403,
		&api.Refusal{Status: 404, Msg: "no such job"}:       404,
		errTooManyFeeds: 429,
		fmt.Errorf("%w: move: give workers", api.ErrBadRequest): 400,
		context.DeadlineExceeded:                                504,
		errors.New("connection reset"):                          502,
	} {
		if got := statusOf(err); got != want {
			t.Errorf("statusOf(%v) = %d, want %d", err, got, want)
		}
	}
}
