package plot

import (
	"fmt"
	"image/color"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
)

// This file holds the panels per configuration: step time measured and
// predicted, and the candidates of a decision with their Pareto front.

// stepTimePlot draws, per configuration, the measured step time as a bar
// in its colour, the step time predicted when it was chosen across it and
// the latest model's prediction as a ring.
func stepTimePlot(r JobReport, cs colours) (*plot.Plot, error) {
	p := newPlot("Step time per configuration", "", "step time (ms)")
	names := make([]string, len(r.StepTimes))
	var chosen, model plotter.XYs
	var fills []color.Color
	for i, s := range r.StepTimes {
		names[i] = s.Label()
		x := float64(i)
		if s.MeasuredS > 0 {
			bar, err := plotter.NewPolygon(plotter.XYs{{X: x - 0.3, Y: 0}, {X: x - 0.3, Y: s.MeasuredS * 1e3},
				{X: x + 0.3, Y: s.MeasuredS * 1e3}, {X: x + 0.3, Y: 0}})
			if err != nil {
				return nil, err
			}
			bar.Color, bar.LineStyle.Width = cs.of(s.Config), 0
			p.Add(bar)
			fills = append(fills, cs.of(s.Config))
		}
		if s.ChosenS > 0 {
			chosen = append(chosen, plotter.XY{X: x, Y: s.ChosenS * 1e3})
		}
		if s.ModelS > 0 {
			model = append(model, plotter.XY{X: x, Y: s.ModelS * 1e3})
		}
	}
	entries := 0
	if len(fills) > 0 {
		p.Legend.Add("measured (median), in the configuration's colour", swatch{fills: fills, line: darkGrey})
		entries++
	}
	for _, g := range []struct {
		pts   plotter.XYs
		label string
		shape draw.GlyphDrawer
		r     vg.Length
	}{{chosen, "predicted when chosen", tickGlyph{}, vg.Points(5)}, {model, orDefault(r.ModelLabel, "predicted by the latest model"), draw.RingGlyph{}, vg.Points(4)}} {
		if len(g.pts) == 0 {
			continue
		}
		s, err := glyphs(g.pts, black, g.r, g.shape)
		if err != nil {
			return nil, err
		}
		p.Add(s)
		p.Legend.Add(g.label, s)
		entries++
	}
	p.NominalX(names...)
	p.X.Tick.Label.Font.Size = vg.Points(8)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	p.Y.Min = 0
	roomAbove(&p.Y, legendRoom(entries), false)
	return p, nil
}

// paretoPlot draws the candidates' predicted time and cost to finish in
// their configurations' colours (grey: never ran), their Pareto front and
// the chosen one; values far beyond the rest sit at the axis' edge with
// their values in a label. Without a price it draws the times alone.
func paretoPlot(r JobReport, cs colours) (*plot.Plot, error) {
	if r.NoPrice {
		return candidateTimesPlot(r, cs)
	}
	p := newPlot("Candidates: predicted time and cost to finish", "time to finish (s)", "cost to finish ($)")
	if r.CandidatesNote != "" {
		p.Title.Text += "\n" + r.CandidatesNote
	}
	n := len(r.Candidates)
	xs, ys := make([]float64, n), make([]float64, n)
	var keepX, keepY float64
	for i, c := range r.Candidates {
		xs[i], ys[i] = c.TimeS, c.CostUSD
		if c.Chosen {
			keepX, keepY = c.TimeS, c.CostUSD
		}
	}
	xr, yr := fitAxis(xs, keepX), fitAxis(ys, keepY)
	shown := make(plotter.XYs, n)
	var labels plotter.XYLabels
	onFront := map[int]bool{}
	for _, i := range objective.Pareto(xs, ys) {
		onFront[i] = true
	}
	var front plotter.XYs
	for i, c := range r.Candidates {
		shown[i] = plotter.XY{X: xr.clamp(xs[i]), Y: yr.clamp(ys[i])}
		clipped := shown[i].X != xs[i] || shown[i].Y != ys[i]
		if err := addCandidate(p, c, shown[i], cs, clipped, shown[i].Y != ys[i] && shown[i].X == xs[i]); err != nil {
			return nil, err
		}
		switch {
		case clipped:
			labels.XYs = append(labels.XYs, shown[i])
			labels.Labels = append(labels.Labels, fmt.Sprintf("%s: %.0f s, $%.4g", c.Label(), xs[i], ys[i]))
		case onFront[i] || c.Chosen:
			labels.XYs = append(labels.XYs, shown[i])
			labels.Labels = append(labels.Labels, c.Label())
		}
		if onFront[i] {
			front = append(front, shown[i])
		}
	}
	sort.Slice(front, func(a, b int) bool { return front[a].X < front[b].X })
	line, err := plotter.NewLine(front)
	if err != nil {
		return nil, err
	}
	line.Color, line.Width = black, vg.Points(1.2)
	corners, err := glyphs(front, black, vg.Points(4.5), draw.SquareGlyph{})
	if err != nil {
		return nil, err
	}
	p.Add(line, corners)
	entries := candidateLegend(p, r, cs, []plot.Thumbnailer{line, corners}, len(front), xr.beyond(xs)+yr.beyond(ys) > 0)
	if err := addLabels(p, labels); err != nil {
		return nil, err
	}
	xr.apply(&p.X, 0.25)
	yr.apply(&p.Y, legendRoom(entries))
	return p, nil
}

// candidateTimesPlot draws the candidates' predicted time to finish, one
// row each, the fastest on top: with no price set they have no cost.
func candidateTimesPlot(r JobReport, cs colours) (*plot.Plot, error) {
	p := newPlot("Candidates: predicted time to finish (no price set: no cost)", "time to finish (s)", "")
	if r.CandidatesNote != "" {
		p.Title.Text += "\n" + r.CandidatesNote
	}
	cands := append([]Candidate(nil), r.Candidates...)
	sort.SliceStable(cands, func(a, b int) bool { return cands[a].TimeS < cands[b].TimeS })
	n := len(cands)
	xs := make([]float64, n)
	var keep float64
	for i, c := range cands {
		xs[i] = c.TimeS
		if c.Chosen {
			keep = c.TimeS
		}
	}
	xr := fitAxis(xs, keep)
	names := make([]string, n)
	var labels plotter.XYLabels
	for i, c := range cands {
		y := float64(n - 1 - i)
		names[n-1-i] = c.Label()
		pt := plotter.XY{X: xr.clamp(xs[i]), Y: y}
		if err := addCandidate(p, c, pt, cs, pt.X != xs[i], false); err != nil {
			return nil, err
		}
		if pt.X != xs[i] {
			labels.XYs = append(labels.XYs, pt)
			labels.Labels = append(labels.Labels, fmt.Sprintf("%.0f s", xs[i]))
		}
	}
	entries := candidateLegend(p, r, cs, nil, 0, xr.beyond(xs) > 0)
	if err := addLabels(p, labels); err != nil {
		return nil, err
	}
	p.NominalY(names...)
	p.Y.Tick.Label.Font.Size = vg.Points(8)
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	roomAbove(&p.Y, legendRoom(entries), false)
	xr.apply(&p.X, 0.15)
	return p, nil
}

// addCandidate draws candidate c at pt: a dot in its configuration's
// colour (grey: never ran), an arrow at the axis' edge when clipped (up
// when only its cost is), a ring around it when it was chosen.
func addCandidate(p *plot.Plot, c Candidate, pt plotter.XY, cs colours, clipped, up bool) error {
	var shape draw.GlyphDrawer = draw.CircleGlyph{}
	radius := vg.Points(3.5)
	if clipped {
		shape, radius = arrowGlyph{Up: up}, vg.Points(5)
	}
	d, err := marker(pt.X, pt.Y, cs.of(c.Config), radius, shape)
	if err != nil {
		return err
	}
	p.Add(d)
	if c.Chosen {
		m, err := marker(pt.X, pt.Y, black, vg.Points(7), draw.RingGlyph{})
		if err != nil {
			return err
		}
		p.Add(m)
	}
	return nil
}

// candidateLegend writes the candidate panels' legend: which candidates
// ran, the front of n points (drawn as front; none when n is 0), the chosen
// one and, when some are, the ones beyond the axis. It returns the number
// of entries.
func candidateLegend(p *plot.Plot, r JobReport, cs colours, front []plot.Thumbnailer, n int, clipped bool) int {
	var ran, never bool
	chosen := ""
	for _, c := range r.Candidates {
		ran, never = ran || cs.ran(c.Config), never || !cs.ran(c.Config)
		if c.Chosen {
			chosen = c.Label()
		}
	}
	entries := 0
	add := func(ok bool, label string, t ...plot.Thumbnailer) {
		if ok {
			p.Legend.Add(label, t...)
			entries++
		}
	}
	add(ran, "candidate the job ran (its colour)", dots{colours: cs.firstColours(), shape: draw.CircleGlyph{}})
	add(never, "candidate never run", dots{colours: []color.Color{grey}, shape: draw.CircleGlyph{}})
	frontLabel := "Pareto front"
	if n == 1 {
		frontLabel = "Pareto front: one point, the fastest and cheapest"
	}
	add(n > 0, frontLabel, front...)
	add(chosen != "", "chosen: "+chosen, dots{colours: []color.Color{black}, shape: draw.RingGlyph{}})
	add(clipped, "beyond the axis (value in its label)", dots{colours: []color.Color{darkGrey}, shape: arrowGlyph{}})
	return entries
}

// addLabels writes small labels right of their points.
func addLabels(p *plot.Plot, labels plotter.XYLabels) error {
	if len(labels.XYs) == 0 {
		return nil
	}
	lab, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	for i := range lab.TextStyle {
		lab.TextStyle[i].Font.Size = vg.Points(8)
		lab.TextStyle[i].XAlign = draw.XLeft
	}
	lab.Offset = vg.Point{X: vg.Points(6), Y: vg.Points(2)}
	p.Add(lab)
	return nil
}

// orDefault is s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
