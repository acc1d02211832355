package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/scavenger-ml/scavenger/optimizer/plot"
)

// writeReport writes rep in format to out: a file, a directory, or "-"
// (standard output); empty is standard output for text and json and
// JOB-report.EXT otherwise.
func (a *app) writeReport(rep jobReport, format, out string) error {
	switch format {
	case "text", "json":
		w, done, err := a.openOut(out, "")
		if err != nil {
			return err
		}
		if format == "json" {
			enc := jsonIndent(w)
			err = enc.Encode(rep)
		} else {
			err = rep.print(w)
		}
		return done(err)
	}
	panels, err := plot.Panels(rep.figures())
	if err != nil {
		return err
	}
	name := rep.Job + "-report." + format
	if st, err := os.Stat(out); out != "" && out != "-" && (strings.HasSuffix(out, "/") || err == nil && st.IsDir()) {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return fmt.Errorf("create report directory %s: %w", out, err)
		}
		if format != "html" {
			for _, p := range panels {
				path := filepath.Join(out, rep.Job+"-"+p.Name+"."+format)
				if err := writeFile(path, func(w io.Writer) error { return plot.WritePanel(w, p, format) }); err != nil {
					return err
				}
				fmt.Fprintln(a.stderr, "scavctl: wrote", path)
			}
		}
		out = filepath.Join(out, name)
	} else if out == "" {
		out = name
	}
	w, done, err := a.openOut(out, format)
	if err != nil {
		return err
	}
	if format == "html" {
		err = rep.html(w, panels)
	} else if len(panels) == 0 {
		err = fmt.Errorf("report of %s: %w", rep.Job, plot.ErrNoData)
	} else {
		err = plot.WriteFigure(w, panels, format)
	}
	if err = done(err); err == nil && out != "-" {
		fmt.Fprintln(a.stderr, "scavctl: wrote", out)
	}
	return err
}

// jsonIndent is the encoder scavctl's JSON output uses.
func jsonIndent(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// openOut opens path for writing ("" or "-": standard output; a binary
// format refuses a terminal). done closes it and returns the first error.
func (a *app) openOut(path, format string) (io.Writer, func(error) error, error) {
	if path == "" || path == "-" {
		if format == "png" && isTerminal(a.stdout) {
			return nil, nil, fmt.Errorf("not writing a PNG to a terminal: give --out FILE")
		}
		return a.stdout, func(err error) error { return err }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("create report %s: %w", path, err)
	}
	return f, func(err error) error {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("write report %s: %w", path, cerr)
		}
		return err
	}, nil
}

// writeFile creates path and writes it with fill.
func writeFile(path string, fill func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	err = fill(f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// figures turns the report into what its figures draw.
func (r jobReport) figures() plot.JobReport {
	f := plot.JobReport{Title: r.Job}
	t0 := r.start
	type key struct{ k, b int }
	var order []key
	measured := map[key][]float64{}
	predicted := map[key]float64{}
	for _, at := range r.Timeline {
		end := at.Started.Add(time.Duration(at.WallS * float64(time.Second)))
		f.Attempts = append(f.Attempts, plot.Span{StartS: at.Started.Sub(t0).Seconds(), EndS: end.Sub(t0).Seconds(),
			Workers: at.Config.Workers, Batch: at.Config.GlobalBatch})
		k := key{at.Config.Workers, at.Config.GlobalBatch}
		if _, ok := measured[k]; !ok {
			order = append(order, k)
			measured[k] = nil
		}
		if at.MeasuredStepS > 0 {
			measured[k] = append(measured[k], at.MeasuredStepS)
		}
		switch {
		case at.ModelStepS > 0:
			predicted[k] = at.ModelStepS
		case at.PredictedStepS > 0 && len(r.Candidates) == 0:
			predicted[k] = at.PredictedStepS
		}
	}
	for _, k := range order {
		f.StepTimes = append(f.StepTimes, plot.StepTime{Label: plot.ConfigLabel(k.k, k.b), MeasuredS: median(measured[k]), PredictedS: predicted[k]})
	}
	for _, p := range r.Noise {
		f.Noise = append(f.Noise, plot.XY{X: p.T, Y: p.V})
	}
	for _, p := range r.Cost {
		f.Cost = append(f.Cost, plot.XY{X: p.T, Y: p.V})
	}
	for _, p := range r.PredictedCost {
		f.PredictedCost = append(f.PredictedCost, plot.XY{X: p.T, Y: p.V})
	}
	for _, c := range r.Candidates {
		f.Candidates = append(f.Candidates, plot.Candidate{Label: plot.ConfigLabel(c.Workers, c.Batch), TimeS: c.TotalS, CostUSD: c.TotalUSD, Chosen: c.Chosen})
	}
	f.PredictedLabel = "predicted when chosen"
	if len(r.Candidates) > 0 {
		f.PredictedLabel = fmt.Sprintf("predicted by the model at step %d", r.CandidatesStep)
		f.CandidatesNote = fmt.Sprintf("decision at step %d, objective %s", r.CandidatesStep, orDash(r.Objective))
	}
	return f
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// html writes the report as one self-contained page: its figures as inline
// SVG and its tables.
func (r jobReport) html(w io.Writer, panels []plot.Panel) error {
	type fig struct {
		Name string
		SVG  template.HTML
	}
	var figs []fig
	for _, p := range panels {
		var b bytes.Buffer
		if err := plot.WritePanel(&b, p, "svg"); err != nil {
			return err
		}
		figs = append(figs, fig{Name: p.Name, SVG: template.HTML(inlineSVG(b.String()))})
	}
	var text bytes.Buffer
	if err := r.print(&text); err != nil {
		return err
	}
	data := struct {
		R         jobReport
		Figures   []fig
		Text      string
		Decisions []reportDecision
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

// reportDecision is one row of the HTML report's decision table.
type reportDecision struct {
	Step                   int64
	Phase, From, To        string
	Reason                 string
	PredictedS, PredictedD string
	Candidates             int
}

func (r jobReport) decisionRows() []reportDecision {
	var out []reportDecision
	for _, d := range r.decisions {
		row := reportDecision{Step: d.Step, Phase: string(d.Phase), Reason: d.Reason, Candidates: len(d.Candidates),
			From: plot.ConfigLabel(d.From.Workers, d.From.GlobalBatch), To: plot.ConfigLabel(d.To.Workers, d.To.GlobalBatch),
			PredictedS: "-", PredictedD: "-"}
		if d.PredictedS > 0 {
			row.PredictedS = fmt.Sprintf("%.1f s", d.PredictedS)
			row.PredictedD = fmt.Sprintf("$%.4f", d.PredictedUSD)
		}
		out = append(out, row)
	}
	return out
}

var reportHTML = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":  func(s float64) string { return fmt.Sprintf("%.1f", s*1e3) },
	"usd": func(v float64) string { return fmt.Sprintf("$%.4f", v) },
	"sec": func(v float64) string { return fmt.Sprintf("%.1f s", v) },
	"cfg": plot.ConfigLabel,
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
Total {{sec .R.TotalS}}, {{usd .R.CostUSD}} at ${{printf "%.2f" .R.PriceUSDPerHour}}/h; relaunches {{sec .R.RelaunchS}}.</p>
<div class="figs">{{range .Figures}}
<figure id="fig-{{.Name}}">{{.SVG}}</figure>{{end}}
</div>
<h2>Attempts</h2>
<table><tr><th>#</th><th>configuration</th><th>steps</th><th>wall</th><th>step measured (ms)</th><th>predicted when chosen (ms)</th><th>model (ms)</th><th class="l">ended by</th></tr>
{{range .R.Timeline}}<tr><td>{{.Attempt.Attempt}}</td><td>{{cfg .Config.Workers .Config.GlobalBatch}}</td><td>{{.FirstStep}}..{{.LastStep}}</td><td>{{sec .WallS}}</td><td>{{ms .MeasuredStepS}}</td><td>{{if .PredictedStepS}}{{ms .PredictedStepS}}{{else}}-{{end}}</td><td>{{if .ModelStepS}}{{ms .ModelStepS}}{{else}}-{{end}}</td><td class="l">{{.EndReason}}</td></tr>
{{end}}</table>
{{if .Decisions}}<h2>Decisions</h2>
<table><tr><th>step</th><th class="l">phase</th><th>from</th><th>to</th><th>predicted time</th><th>predicted cost</th><th>candidates</th><th class="l">reason</th></tr>
{{range .Decisions}}<tr><td>{{.Step}}</td><td class="l">{{.Phase}}</td><td>{{.From}}</td><td>{{.To}}</td><td>{{.PredictedS}}</td><td>{{.PredictedD}}</td><td>{{.Candidates}}</td><td class="l">{{.Reason}}</td></tr>
{{end}}</table>{{end}}
{{if .R.Candidates}}<h2>Candidates of the decision at step {{.R.CandidatesStep}}</h2>
<table><tr><th>configuration</th><th>step (ms)</th><th>time to finish</th><th>cost to finish</th><th>chosen</th></tr>
{{range .R.Candidates}}<tr><td>{{cfg .Workers .Batch}}</td><td>{{ms .StepS}}</td><td>{{sec .TotalS}}</td><td>{{usd .TotalUSD}}</td><td>{{if .Chosen}}&#10003;{{end}}</td></tr>
{{end}}</table>{{end}}
<h2>Text report</h2>
<pre>{{.Text}}</pre>
</body></html>
`))
