package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/optimizer/plot"
	"github.com/scavenger-ml/scavenger/report/reporttest"
)

// TestCloudJobReportTellsOneCostStory renders a cloud job's report in every
// format and compares their figures: the text, the JSON, the figures (the
// PNG's heading and cost panel), the HTML and top all show the bill
// ($0.00067, though no price was set), with the same words; and its
// candidates are labelled with their machine types, so that the same
// workers and batch on two types are two labels.
func TestCloudJobReportTellsOneCostStory(t *testing.T) {
	j, recs, now := reporttest.CloudJob()
	rep := Make(j, recs, now)
	const label = "$0.00067 billed for its machines"

	var text bytes.Buffer
	if err := rep.Print(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "Total: 1m40s, "+label+";") {
		t.Errorf("text report:\n%s\nwant the total %q", text.String(), label)
	}

	b, _ := json.Marshal(rep)
	var data struct {
		CostUSD   float64 `json:"cost_usd"`
		CostBasis string  `json:"cost_basis"`
	}
	if err := json.Unmarshal(b, &data); err != nil || data.CostUSD != 0.00067 || data.CostBasis != string(api.CostBilled) {
		t.Errorf("JSON cost %v (%s), %v; want 0.00067 billed", data.CostUSD, data.CostBasis, err)
	}

	f := rep.Figures()
	if f.NoPrice || !strings.HasSuffix(f.Subtitle, "; "+label) || len(f.Cost) == 0 || f.Cost[len(f.Cost)-1].Y != 0.00067 {
		t.Errorf("figures: no price %v, heading %q, cost %v; want the bill drawn and said as %q", f.NoPrice, f.Subtitle, f.Cost, label)
	}
	if names := strings.Join(plot.PanelNames(f), " "); !strings.Contains(names, "cost") {
		t.Errorf("panels %q: want the cost panel", names)
	}
	seen := map[string]bool{}
	for _, c := range f.Candidates {
		if l := c.Config.Label(); seen[l] {
			t.Errorf("two candidates are labelled %q", l)
		} else {
			seen[l] = true
		}
	}
	if !seen["loc.full 2x128"] || !seen["loc.half 2x128"] {
		t.Errorf("candidate labels %v: want their machine types", seen)
	}
	panels, err := plot.Panels(f)
	if err != nil {
		t.Fatal(err)
	}
	fig, err := plot.NewFigure(f)
	if err != nil {
		t.Fatal(err)
	}
	var png bytes.Buffer
	if err := plot.WriteFigure(&png, fig, "png"); err != nil || png.Len() == 0 {
		t.Errorf("PNG: %v", err)
	}

	var page bytes.Buffer
	if err := rep.HTML(&page, panels); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{label, "<td>loc.full 2x128</td>", "<td>loc.half 2x128</td>"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("the HTML report lacks %q", want)
		}
	}
	if strings.Contains(page.String(), "no price set") || strings.Contains(text.String(), "no price set") {
		t.Error("a report of a billed job says that no price is set")
	}

	frame := BuildTopFrame([]api.Job{j}, NewTopTracker(), nil, now)
	if got := frame.Jobs[0].CostUSD; got != 0.00067 {
		t.Errorf("top's cost %v, want the bill", got)
	}
	j.State, j.Ended = api.StateRunning, nil
	j.Decisions[len(j.Decisions)-1].Time = now
	frame = BuildTopFrame([]api.Job{j}, NewTopTracker(), nil, now)
	if r := frame.Jobs[0]; costText(r) == "-" || r.CostUSD != 0.00067+0.0004 {
		t.Errorf("top's cost of the running job: %q (%v); want the bill and the predicted rest, 0.00107", costText(r), r.CostUSD)
	}
}
