package report

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/words"
	"github.com/scavenger-ml/scavenger/optimizer/plot"
)

// orDash is s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// HTML writes the report as one self-contained page: its figures (the
// panels of plot.Panels(r.Figures())) as inline SVG and its tables.
func (r JobReport) HTML(w io.Writer, panels []plot.Panel) error {
	type fig struct {
		Name string
		SVG  template.HTML
	}
	var figs []fig
	for _, p := range panels {
		var b bytes.Buffer
		if err := plot.WritePanel(&b, p, "svg"); err != nil {
			return fmt.Errorf("draw figure %s of %s: %w", p.Name, r.Job, err)
		}
		figs = append(figs, fig{Name: p.Name, SVG: template.HTML(inlineSVG(b.String()))})
	}
	var text bytes.Buffer
	if err := r.Print(&text); err != nil {
		return err // Print names the report
	}
	data := struct {
		R         JobReport
		Figures   []fig
		Text      string
		Decisions []decisionRow
	}{R: r, Figures: figs, Text: text.String(), Decisions: r.decisionRows()}
	if err := reportHTML.Execute(w, data); err != nil {
		return fmt.Errorf("render html report of %s: %w", r.Job, err)
	}
	return nil
}

// inlineSVG drops the XML prolog of an SVG document so that it can sit in HTML.
func inlineSVG(s string) string {
	if i := strings.Index(s, "<svg"); i > 0 {
		return s[i:]
	}
	return s
}

// decisionRow is one row of the HTML report's decision table.
type decisionRow struct {
	Step                   int64
	Phase, From, To        string
	Reason, Words          string
	PredictedS, PredictedD string
	Candidates             int
}

// decisionRows are the rows of the HTML report's decision table.
func (r JobReport) decisionRows() []decisionRow {
	var out []decisionRow
	for _, d := range r.decisions {
		row := decisionRow{Step: d.Step, Phase: string(d.Phase), Reason: d.Reason, Words: words.Said(d, r.ShowsCost()), Candidates: len(d.Candidates),
			From: words.ConfigNotation(d.From), To: words.ConfigNotation(d.To),
			PredictedS: "-", PredictedD: "-"}
		if d.PredictedS > 0 {
			row.PredictedS = fmt.Sprintf("%.1f s", d.PredictedS)
		}
		if d.PredictedS > 0 && r.ShowsCost() {
			row.PredictedD = api.USDText(d.PredictedUSD)
		}
		out = append(out, row)
	}
	return out
}

// reportHTML is the page HTML fills.
var reportHTML = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms": func(s float64) string { return fmt.Sprintf("%.1f", s*1e3) },
	"flags": func(f []string) string {
		if len(f) == 0 {
			return ""
		}
		return " [" + strings.Join(f, ",") + "]"
	},
	"join": func(f []string) string { return strings.Join(f, ", ") },
	"usd":  api.USDText,
	"sec":  func(v float64) string { return fmt.Sprintf("%.1f s", v) },
	"cfg":  words.ConfigNotation,
	"cand": func(c api.CandidatePrediction) string {
		return words.Notation(candidateType(c.Type), c.Workers, c.Batch)
	},
	"fin": func(f Finish) string { return words.Notation(f.Type, f.Workers, f.Batch) },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Scavenger report: {{.R.Job}}</title>
<style>
body{font-family:sans-serif;margin:1.5em;max-width:80em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.2em .6em;text-align:right;font-size:90%}
th{background:#f3f3f3}td.l{text-align:left}
.figs{display:flex;flex-wrap:wrap;gap:1em}
.figs figure{margin:0}
.figs svg{width:36em;height:auto;border:1px solid #eee}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto}
</style></head><body>
<h1>Job {{.R.Job}}</h1>
<p>State <b>{{.R.State}}</b>{{if .R.Policy}}, policy <b>{{.R.Policy}}</b>, objective <b>{{.R.Objective}}</b>, {{.R.Decisions}} decision(s){{end}}.
Total {{sec .R.TotalS}}, {{.R.CostText}}; relaunches {{sec .R.RelaunchS}}.</p>
<div class="figs">{{range .Figures}}
<figure id="fig-{{.Name}}">{{.SVG}}</figure>{{end}}
</div>
<h2>Attempts</h2>
<table><tr><th>#</th><th>configuration</th><th>steps</th><th>wall</th><th>step measured (ms)</th><th>predicted when chosen</th><th>model (ms)</th><th class="l">ended by</th></tr>
{{range .R.Timeline}}<tr><td>{{.Attempt.Attempt}}</td><td>{{cfg .Config}}</td><td>{{.FirstStep}}..{{.LastStep}}</td><td>{{sec .WallS}}</td><td>{{ms .MeasuredStepS}}</td><td>{{.PredictedText}}</td><td>{{if .ModelStepS}}{{ms .ModelStepS}}{{flags .ModelFlags}}{{else}}-{{end}}</td><td class="l">{{.EndReason}}</td></tr>
{{end}}</table>
{{if .Decisions}}<h2>Decisions</h2>
<table><tr><th>step</th><th class="l">phase</th><th>from</th><th>to</th><th>predicted time</th><th>predicted cost</th><th>candidates</th><th class="l">what and why (the policy's own words on hover)</th></tr>
{{range .Decisions}}<tr><td>{{.Step}}</td><td class="l">{{.Phase}}</td><td>{{.From}}</td><td>{{.To}}</td><td>{{.PredictedS}}</td><td>{{.PredictedD}}</td><td>{{.Candidates}}</td><td class="l" title="{{.Reason}}">{{.Words}}</td></tr>
{{end}}</table>{{end}}
{{if .R.Finishes}}<h2>Predicted time to finish</h2>
<table><tr><th>step</th><th class="l">phase</th><th>to</th><th>predicted</th><th>took</th><th>error</th></tr>
{{range .R.Finishes}}{{$t := .Text}}<tr><td>{{.Step}}</td><td class="l">{{.Phase}}</td><td>{{fin .}}</td><td>{{$t.Predicted}}</td><td>{{$t.Took}}</td><td>{{$t.Error}}</td></tr>
{{end}}</table>{{end}}
{{if .R.Candidates}}<h2>Candidates of the decision at step {{.R.CandidatesStep}}</h2>
<p>Predictions, not facts: each step time with its 90 % interval; flagged ones (low-confidence: the interval spans more than ±25 %; non-monotone: against their neighbours a larger batch is faster, or a sample dearer) are not to be read as measurements.</p>
<table><tr><th>configuration</th><th>step (ms)</th><th>90 % interval (ms)</th><th>time to finish</th><th>cost to finish</th><th class="l">flags</th><th>chosen</th></tr>
{{range .R.Candidates}}<tr><td>{{cand .}}</td><td>{{ms .StepS}}</td><td>{{if .StepHiS}}{{ms .StepLoS}}..{{ms .StepHiS}}{{else}}-{{end}}</td><td>{{sec .TotalS}}</td><td>{{if $.R.ShowsCost}}{{usd .TotalUSD}}{{else}}-{{end}}</td><td class="l">{{join .Flags}}</td><td>{{if .Chosen}}&#10003;{{end}}</td></tr>
{{end}}</table>{{end}}
<h2>Text report</h2>
<pre>{{.Text}}</pre>
</body></html>
`))
