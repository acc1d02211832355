package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/optimizer/plot"
	"github.com/scavenger-ml/scavenger/report/reporttest"
)

func TestEndKind(t *testing.T) {
	probe, optimised := &Attempt{StartedBy: "probing"}, &Attempt{StartedBy: "optimised"}
	for _, c := range []struct {
		why  string
		next *Attempt
		want plot.EndKind
	}{
		{"moved: scavenger search: probe 2 of 4", probe, plot.EndProbe},
		{"moved: scavenger search over 4 probes: least time", optimised, plot.EndMove},
		{"moved: requested by scavctl move", &Attempt{}, plot.EndMove},
		{"moved: pre-empted: rank 0 received SIGTERM from the scheduler", &Attempt{}, plot.EndPreempt},
		{"moved: pre-empted: rank 0 received SIGTERM from the scheduler", probe, plot.EndPreempt},
		{"failed: lost host b", &Attempt{}, plot.EndFailure},
		{"failed: rank 1 exited with 1", nil, plot.EndFailure},
		{"failed", nil, plot.EndFailure},
		{"lost", nil, plot.EndFailure},
		{"lost: scavd restarted", nil, plot.EndFailure},
		{"stopped", nil, plot.EndStop},
		{"succeeded", nil, plot.EndFinish},
		{"", nil, plot.EndNone}, // still running
	} {
		at := Attempt{Attempt: api.Attempt{EndReason: c.why}}
		if got := endKind(at, c.next); got != c.want {
			t.Errorf("%q: %q, want %q", c.why, got, c.want)
		}
	}
}

func TestFigures(t *testing.T) {
	j, recs, now := reporttest.SyntheticJob()
	f := Make(j, recs, now).Figures()
	if f.Title != "Job syn-000001 (succeeded)" || !strings.Contains(f.Subtitle, "; $1 at $36/h") /* the label of every view (api.JobCost) */ ||
		!strings.Contains(f.Subtitle, "2 attempt(s), 1 relaunch(es) taking 2.0 s") {
		t.Errorf("heading %q / %q", f.Title, f.Subtitle)
	}
	if f.EndS != 100 || f.NoPrice {
		t.Errorf("end %v, no price %v", f.EndS, f.NoPrice)
	}
	if len(f.Attempts) != 2 || f.Attempts[0].End != plot.EndProbe || f.Attempts[1].End != plot.EndFinish {
		t.Errorf("attempts %+v", f.Attempts)
	}
	// Attempt 2 was predicted only after it started: a model's value, not one "when chosen".
	want := []plot.StepTime{
		{Config: plot.Config{Workers: 1, Batch: 32}, MeasuredS: 0.25, ModelS: 0.25},
		{Config: plot.Config{Workers: 2, Batch: 128}, MeasuredS: 0.3, ModelS: 0.3},
	}
	if len(f.StepTimes) != 2 || f.StepTimes[0] != want[0] || f.StepTimes[1] != want[1] {
		t.Errorf("step times %+v, want %+v", f.StepTimes, want)
	}
	if len(f.Throughput) != 2 || f.Throughput[0].Config != want[0].Config || f.Throughput[1].Config != want[1].Config {
		t.Fatalf("throughput %+v: want one segment per attempt", f.Throughput)
	}
	for i, s := range f.Throughput {
		for _, p := range s.Points {
			if rate := float64(s.Batch) / (0.29 + 0.05*float64(i)); p.Y < rate*0.99 || p.Y > rate*1.01 {
				t.Fatalf("attempt %d: %v samples/s, want %v", i+1, p.Y, rate)
			}
		}
	}
	if len(f.Loss) < 100 || f.Loss[0].Y < f.Loss[len(f.Loss)-1].Y {
		t.Errorf("loss %v", f.Loss)
	}
	if len(f.Finishes) != 1 || f.Finishes[0] != (plot.Finish{AtS: 50, To: want[1].Config, PredictedS: 50, TookS: 50}) {
		t.Errorf("finishes %+v", f.Finishes)
	}
	if got := strings.Join(plot.PanelNames(f), " "); got != "timeline steptime throughput loss noise cost finish pareto" {
		t.Errorf("panels %q", got)
	}
}

// TestNoPrice: a job with no price has no cost panel, and its figure and
// pages say so instead of showing dollars.
func TestNoPrice(t *testing.T) {
	j, recs, now := reporttest.SyntheticJob()
	j.Optimize.PriceUSDPerHour = 0
	rep := Make(j, recs, now)
	f := rep.Figures()
	if !f.NoPrice || len(f.Cost) != 0 || !strings.Contains(f.Subtitle, "no price set") || strings.Contains(f.Subtitle, "$") {
		t.Errorf("no price %v, cost %v, subtitle %q", f.NoPrice, f.Cost, f.Subtitle)
	}
	if got := strings.Join(plot.PanelNames(f), " "); got != "timeline steptime throughput loss noise finish pareto" {
		t.Errorf("panels %q", got)
	}
	panels, err := plot.Panels(f)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := rep.HTML(&b, panels); err != nil {
		t.Fatal(err)
	}
	reporttest.CheckHTML(t, b.String(), 7)
	if page := b.String(); strings.Contains(page, "$0.") || strings.Contains(page, "$1.") {
		t.Error("dollars in the page of a job without a price")
	}
}

// TestHTMLPredictedWhenChosen: every attempt a decision started says what
// that decision predicted, as the text report does (the first attempt no
// decision started).
func TestHTMLPredictedWhenChosen(t *testing.T) {
	j, recs, now := reporttest.SyntheticJob()
	for _, c := range []struct {
		name      string
		predicted float64
		want      string
	}{
		{"a probe chosen before any model", 0, "<td>300.0 ms (+0%) later</td>"},
		{"a probe a model predicted", 0.28, "<td>280.0 ms (-7%)</td>"},
	} {
		j.Decisions[0].PredictedStepS = c.predicted
		rep := Make(j, recs, now)
		var page, text bytes.Buffer
		if err := rep.HTML(&page, nil); err != nil {
			t.Fatal(err)
		}
		if err := rep.Print(&text); err != nil {
			t.Fatal(err)
		}
		if rep.Timeline[1].StartedBy != "probing" || !strings.Contains(page.String(), strings.ReplaceAll(c.want, "+", "&#43;")) ||
			!strings.Contains(text.String(), strings.TrimSuffix(strings.TrimPrefix(c.want, "<td>"), "</td>")) {
			t.Errorf("%s: the page or the text lacks %q:\n%s", c.name, c.want, text.String())
		}
	}
}
