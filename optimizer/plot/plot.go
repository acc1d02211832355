// Package plot draws a simulation's time–cost picture with gonum/plot: every
// fixed candidate, their Pareto front, the oracle and the policy's outcome
// (`scavctl sim --plot FILE.svg|.png`). It is kept apart from sim so that the
// simulator does not pull in the plotting dependencies.
package plot

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

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
	if len(rep.Front) == 0 {
		return fmt.Errorf("plot %s: report has no candidates", path)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, objective %s, policy %s", rep.App, rep.Objective, rep.Policy)
	p.X.Label.Text = "job completion time (h)"
	p.Y.Label.Text = "cost ($)"

	all := make(plotter.XYs, len(rep.Front))
	xs := make([]float64, len(rep.Front))
	ys := make([]float64, len(rep.Front))
	for i, o := range rep.Front {
		all[i] = plotter.XY{X: o.JCTS / 3600, Y: o.CostUSD}
		xs[i], ys[i] = o.JCTS, o.CostUSD
	}
	cands, err := plotter.NewScatter(all)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	cands.GlyphStyle.Color = color.Gray{Y: 150}
	cands.GlyphStyle.Radius = vg.Points(2)

	idx := objective.Pareto(xs, ys)
	front := make(plotter.XYs, len(idx))
	for i, j := range idx {
		front[i] = all[j]
	}
	line, err := plotter.NewLine(front)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	line.Color = color.RGBA{B: 200, A: 255}

	mark := func(x, y float64, c color.Color, shape draw.GlyphDrawer) (*plotter.Scatter, error) {
		s, err := plotter.NewScatter(plotter.XYs{{X: x, Y: y}})
		if err != nil {
			return nil, err
		}
		s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = c, vg.Points(5), shape
		return s, nil
	}
	oracle, err := mark(rep.Oracle.JCTS/3600, rep.Oracle.CostUSD, color.RGBA{G: 160, A: 255}, draw.TriangleGlyph{})
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	outcome, err := mark(rep.JCTS/3600, rep.CostUSD, color.RGBA{R: 220, A: 255}, draw.CrossGlyph{})
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	p.Add(plotter.NewGrid(), cands, line, oracle, outcome)
	p.Legend.Add("fixed candidates", cands)
	p.Legend.Add("Pareto front", line)
	p.Legend.Add(fmt.Sprintf("oracle %s K=%d B=%d", rep.Oracle.Type, rep.Oracle.Workers, rep.Oracle.Batch), oracle)
	p.Legend.Add(fmt.Sprintf("%s outcome (%d relaunches)", rep.Policy, rep.Relaunches), outcome)
	p.Legend.Top = true
	p.X.Scale = plot.LogScale{}
	p.Y.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}
