// Package plot draws Scavenger's pictures with gonum/plot: a simulation's
// time–cost picture — every fixed candidate, their Pareto front, the oracle
// and the policy's outcome (`scavctl sim --plot FILE.svg|.png`) — and the
// figures of a job's report (`scavctl report --format svg|png|html`):
// configurations over time, step time predicted against measured, gradient
// noise scale, cost, and the Pareto front of a decision's candidates. Its
// functions take plain values and return pictures; it is kept apart from sim
// and the daemon so that they do not pull in the plotting dependencies.
package plot

import (
	"errors"
	"fmt"
	"image/color"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/scavenger-ml/scavenger/internal/words"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/sim"
)

// Front writes the Pareto picture of rep to path (.svg, .png or .pdf).
func Front(rep *sim.Report, path string) error {
	ext := strings.ToLower(filepath.Ext(path))
	switch ext {
	case ".svg", ".png", ".pdf":
	default:
		return fmt.Errorf("plot %s: %w %q (want .svg, .png or .pdf)", path, ErrFormat, ext)
	}
	p, err := frontPlot(rep)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// frontPlot is the Pareto picture of rep: every fixed candidate, their
// front, the oracle and the outcome, on log axes labelled at 1, 2 and 5 ×
// 10^k, with the legend in room above every point.
func frontPlot(rep *sim.Report) (*plot.Plot, error) {
	if len(rep.Front) == 0 {
		return nil, errors.New("report has no candidates")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, objective %s, policy %s", rep.App, rep.Objective, rep.Policy)
	p.X.Label.Text = "job completion time (h)"
	p.Y.Label.Text = "cost ($)"

	all := make(plotter.XYs, len(rep.Front))
	for i, o := range rep.Front {
		all[i] = plotter.XY{X: o.JCTS / 3600, Y: o.CostUSD}
	}
	cands, line, err := candidatesAndFront(all)
	if err != nil {
		return nil, err
	}
	cands.GlyphStyle.Radius = vg.Points(2)

	oracle, err := marker(rep.Oracle.JCTS/3600, rep.Oracle.CostUSD, color.RGBA{G: 160, A: 255}, vg.Points(5), draw.TriangleGlyph{})
	if err != nil {
		return nil, err
	}
	outcome, err := marker(rep.JCTS/3600, rep.CostUSD, color.RGBA{R: 220, A: 255}, vg.Points(5), draw.CrossGlyph{})
	if err != nil {
		return nil, err
	}
	p.Add(plotter.NewGrid(), cands, line, oracle, outcome)
	p.Legend.Add("fixed candidates", cands)
	p.Legend.Add("Pareto front", line)
	p.Legend.Add("oracle "+words.NotationOn(rep.Oracle.Type, rep.Oracle.Nodes, rep.Oracle.Workers, rep.Oracle.Batch), oracle)
	p.Legend.Add(fmt.Sprintf("%s outcome (%s)", rep.Policy, words.Count(rep.Relaunches, "relaunch")), outcome)
	p.Legend.Top = true
	p.X.Scale = plot.LogScale{}
	p.Y.Scale = plot.LogScale{}
	p.X.Tick.Marker = logTicks{}
	p.Y.Tick.Marker = logTicks{}
	roomAbove(&p.Y, legendRoom(4), true) // the legend above every point
	return p, nil
}

// candidatesAndFront draws points as grey dots and their time–cost Pareto
// front (objective.Pareto) as a blue line.
func candidatesAndFront(all plotter.XYs) (*plotter.Scatter, *plotter.Line, error) {
	cands, err := plotter.NewScatter(all)
	if err != nil {
		return nil, nil, err
	}
	cands.GlyphStyle.Color = grey
	xs := make([]float64, len(all))
	ys := make([]float64, len(all))
	for i, p := range all {
		xs[i], ys[i] = p.X, p.Y
	}
	idx := objective.Pareto(xs, ys)
	front := make(plotter.XYs, len(idx))
	for i, j := range idx {
		front[i] = all[j]
	}
	sort.Slice(front, func(a, b int) bool { return front[a].X < front[b].X })
	line, err := plotter.NewLine(front)
	if err != nil {
		return nil, nil, err
	}
	line.Color = color.RGBA{B: 200, A: 255}
	return cands, line, nil
}
