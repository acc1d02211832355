package plot

import (
	"fmt"
	"image/color"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/scavenger-ml/scavenger/optimizer/sim"
)

// This file holds the panels over the job's time: the timeline, the
// throughput, the loss, the noise scale, the cost and the predicted time to
// finish. Their X axes all run from 0 to the job's end.

// endGlyphs are the glyphs the timeline marks attempts' ends with.
var endGlyphs = map[EndKind]draw.GlyphDrawer{
	EndProbe:   draw.TriangleGlyph{},
	EndMove:    draw.PyramidGlyph{},
	EndPreempt: draw.RingGlyph{},
	EndFailure: draw.CrossGlyph{},
	EndStop:    draw.BoxGlyph{},
	EndFinish:  draw.CircleGlyph{},
}

// endLegend is what the timeline's legend says of each kind of end.
var endLegend = map[EndKind]string{
	EndProbe:   "ended for a probe",
	EndMove:    "ended for a move",
	EndPreempt: "pre-empted",
	EndFailure: "failed or lost",
	EndStop:    "stopped",
	EndFinish:  "finished",
}

// timelinePlot draws each attempt as a bar on its own row in its
// configuration's colour, labelled with it, from its start to its end,
// where a glyph says how it ended: the gaps between bars are the relaunches.
func timelinePlot(r JobReport, cs colours) (*plot.Plot, error) {
	p := newPlot("Configurations over time", "time since start (s)", "attempt")
	n := len(r.Attempts)
	var labels plotter.XYLabels
	ends := map[EndKind]plotter.XYs{}
	ticks := make([]plot.Tick, n)
	for i, s := range r.Attempts {
		y := float64(n - 1 - i) // the first attempt on top
		l, err := plotter.NewLine(plotter.XYs{{X: s.StartS, Y: y}, {X: s.EndS, Y: y}})
		if err != nil {
			return nil, fmt.Errorf("attempt %d: %w", i+1, err)
		}
		l.Width, l.Color = vg.Points(8), cs.of(s.Config)
		p.Add(l)
		labels.XYs = append(labels.XYs, plotter.XY{X: s.StartS, Y: y + 0.3})
		labels.Labels = append(labels.Labels, s.Label())
		if s.End != EndNone {
			ends[s.End] = append(ends[s.End], plotter.XY{X: s.EndS, Y: y})
		}
		ticks[i] = plot.Tick{Value: y, Label: fmt.Sprintf("#%d", i+1)}
	}
	lab, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for i := range lab.TextStyle {
		lab.TextStyle[i].Font.Size = vg.Points(8)
	}
	p.Add(lab)
	entries := 0
	for _, k := range endKinds {
		if len(ends[k]) == 0 {
			continue
		}
		g, err := glyphs(ends[k], black, vg.Points(4.5), endGlyphs[k])
		if err != nil {
			return nil, err
		}
		p.Add(g)
		p.Legend.Add(endLegend[k], g)
		entries++
	}
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.2
	roomAbove(&p.Y, legendRoom(entries), false)
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	timeAxis(p, r)
	return p, nil
}

// throughputPlot draws the samples per second over time, each attempt in
// its configuration's colour.
func throughputPlot(r JobReport, cs colours) (*plot.Plot, error) {
	p := newPlot("Throughput", "time since start (s)", "samples/s")
	thumb := map[Config]plot.Thumbnailer{}
	for _, s := range r.Throughput {
		if len(s.Points) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys(s.Points))
		if err != nil {
			return nil, err
		}
		l.Color, l.Width = cs.of(s.Config), vg.Points(1.5)
		p.Add(l)
		if len(s.Points) == 1 {
			d, err := glyphs(xys(s.Points), cs.of(s.Config), vg.Points(2), draw.CircleGlyph{})
			if err != nil {
				return nil, err
			}
			p.Add(d)
		}
		if thumb[s.Config] == nil {
			thumb[s.Config] = l
		}
	}
	entries := 0
	for _, c := range cs.order {
		if thumb[c] != nil {
			p.Legend.Add(c.Label(), thumb[c])
			entries++
		}
	}
	p.Y.Min = 0
	roomAbove(&p.Y, legendRoom(entries), false)
	timeAxis(p, r)
	return p, nil
}

// lossPlot draws rank 0's training loss over time.
func lossPlot(r JobReport, _ colours) (*plot.Plot, error) {
	p := newPlot("Training loss", "time since start (s)", "loss")
	l, err := plotter.NewLine(xys(r.Loss))
	if err != nil {
		return nil, err
	}
	l.Color = black
	p.Add(l)
	p.Legend.Add("loss (rank 0, averaged over a few steps)", l)
	roomAbove(&p.Y, legendRoom(1), false)
	timeAxis(p, r)
	return p, nil
}

// noisePlot draws the gradient noise scale over time on a log scale, with
// the global batch the job ran at for comparison (both in samples). The
// estimates of single steps scatter widely (a few steps can read 100 times
// the rest): they are faint dots, the line is their running median over
// noiseWindow points within each attempt, and the axis shows the bulk of
// them (what lies beyond sits on its edge, and the legend says so).
func noisePlot(r JobReport, _ colours) (*plot.Plot, error) {
	p := newPlot("Gradient noise scale", "time since start (s)", "samples (log)")
	var pos plotter.XYs
	for _, q := range r.Noise {
		if q.Y > 0 {
			pos = append(pos, plotter.XY{X: q.X, Y: q.Y})
		}
	}
	if len(pos) == 0 {
		return nil, ErrNoData
	}
	runs := splitAtRelaunches(pos, r.Attempts)
	var medians []plotter.XYs
	for _, run := range runs {
		medians = append(medians, runningMedian(run, noiseWindow))
	}
	lo, hi := noiseRange(pos, medians, r.Attempts)
	var clipped int
	edge := make(plotter.XYs, 0, len(pos))
	for _, q := range pos {
		if q.Y < lo || q.Y > hi {
			clipped++
			q.Y = math.Min(math.Max(q.Y, lo), hi)
		}
		edge = append(edge, q)
	}
	dots, err := glyphs(edge, lightGrey, vg.Points(1.2), draw.CircleGlyph{})
	if err != nil {
		return nil, err
	}
	p.Add(dots)
	// One line per attempt: a line across a relaunch would draw estimates
	// where there were none.
	var thumb plot.Thumbnailer
	for _, run := range medians {
		l, err := plotter.NewLine(run)
		if err != nil {
			return nil, err
		}
		l.Color = black
		p.Add(l)
		if len(run) == 1 {
			d, err := glyphs(run, black, vg.Points(1.5), draw.CircleGlyph{})
			if err != nil {
				return nil, err
			}
			p.Add(d)
		}
		if thumb == nil {
			thumb = l
		}
	}
	p.Legend.Add(fmt.Sprintf("noise scale B_noise (running median of %d)", noiseWindow), thumb)
	single := "estimates of single steps"
	if clipped > 0 {
		single += fmt.Sprintf(" (%d beyond the axis, on its edge)", clipped)
	}
	p.Legend.Add(single, dots)
	// The global batch of each attempt, apart: the relaunches are gaps.
	entries := 2
	for _, s := range r.Attempts {
		if s.Batch <= 0 {
			continue
		}
		b, err := plotter.NewLine(plotter.XYs{{X: s.StartS, Y: float64(s.Batch)}, {X: s.EndS, Y: float64(s.Batch)}})
		if err != nil {
			return nil, err
		}
		b.Color, b.Dashes = darkGrey, []vg.Length{vg.Points(4), vg.Points(2)}
		p.Add(b)
		if entries == 2 {
			p.Legend.Add("global batch", b)
			entries++
		}
	}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	p.Y.Min, p.Y.Max = lo, hi
	roomAbove(&p.Y, legendRoom(entries), true)
	timeAxis(p, r)
	return p, nil
}

// noiseWindow is how many estimates the noise panel's running median takes.
const noiseWindow = 9

// runningMedian is the median of each point's window of n points around it.
func runningMedian(pts plotter.XYs, n int) plotter.XYs {
	out := make(plotter.XYs, len(pts))
	buf := make([]float64, 0, n)
	for i, q := range pts {
		a, b := max(0, i-n/2), min(len(pts), i+n/2+1)
		buf = buf[:0]
		for _, w := range pts[a:b] {
			buf = append(buf, w.Y)
		}
		sort.Float64s(buf)
		out[i] = plotter.XY{X: q.X, Y: buf[len(buf)/2]}
	}
	return out
}

// noiseRange is the noise panel's Y range: the medians, the batches, and
// the estimates between their 5th and 95th percentiles, with a margin.
func noiseRange(pos plotter.XYs, medians []plotter.XYs, spans []Span) (lo, hi float64) {
	ys := make([]float64, len(pos))
	for i, q := range pos {
		ys[i] = q.Y
	}
	sort.Float64s(ys)
	lo, hi = sim.Quantile(ys, 0.05), sim.Quantile(ys, 0.95)
	for _, run := range medians {
		for _, q := range run {
			lo, hi = math.Min(lo, q.Y), math.Max(hi, q.Y)
		}
	}
	for _, s := range spans {
		if b := float64(s.Batch); b > 0 {
			lo, hi = math.Min(lo, b), math.Max(hi, b)
		}
	}
	return lo / 1.3, hi * 1.3
}

// splitAtRelaunches splits pts (in order of time) where an attempt of
// spans started between two of them.
func splitAtRelaunches(pts plotter.XYs, spans []Span) []plotter.XYs {
	var out []plotter.XYs
	for i, q := range pts {
		if i == 0 || startedBetween(spans, pts[i-1].X, q.X) {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], q)
	}
	return out
}

// startedBetween reports whether an attempt of spans started after a and
// no later than b.
func startedBetween(spans []Span, a, b float64) bool {
	for _, s := range spans {
		if s.StartS > a && s.StartS <= b {
			return true
		}
	}
	return false
}

// costPlot draws the cumulative cost and each decision's predicted cost at
// the finish.
func costPlot(r JobReport, _ colours) (*plot.Plot, error) {
	p := newPlot("Cost", "time since start (s)", "cost ($)")
	l, err := plotter.NewLine(xys(r.Cost))
	if err != nil {
		return nil, err
	}
	l.Color = black
	p.Add(l)
	p.Legend.Add("spent", l)
	entries := 1
	if len(r.PredictedCost) > 0 {
		s, err := glyphs(xys(r.PredictedCost), black, vg.Points(4), draw.RingGlyph{})
		if err != nil {
			return nil, err
		}
		p.Add(s)
		p.Legend.Add("at the finish, as a decision predicted it", s)
		entries++
	}
	p.Legend.Left = true
	p.Y.Min = 0
	roomAbove(&p.Y, legendRoom(entries), false)
	timeAxis(p, r)
	return p, nil
}

// finishPlot draws, at each decision that predicted one, the time to finish
// it predicted (in the colour of the configuration it chose) against the
// time it took, which is the time left from the decision to the job's end.
func finishPlot(r JobReport, cs colours) (*plot.Plot, error) {
	p := newPlot("Time to finish: predicted at each decision vs actual", "time since start (s)", "time to finish (s)")
	var labels plotter.XYLabels
	var used []Config
	seen := map[Config]bool{}
	finished := false
	for _, f := range r.Finishes {
		if f.TookS > 0 {
			finished = true
			c, err := plotter.NewLine(plotter.XYs{{X: f.AtS, Y: f.PredictedS}, {X: f.AtS, Y: f.TookS}})
			if err != nil {
				return nil, err
			}
			c.Color, c.Dashes = grey, []vg.Length{vg.Points(2), vg.Points(2)}
			p.Add(c)
			labels.XYs = append(labels.XYs, plotter.XY{X: f.AtS, Y: f.PredictedS})
			labels.Labels = append(labels.Labels, fmt.Sprintf("%+.0f%%", 100*(f.PredictedS-f.TookS)/f.TookS))
		}
		if !seen[f.To] {
			seen[f.To] = true
			used = append(used, f.To)
		}
	}
	var pred []color.Color
	for _, f := range r.Finishes {
		m, err := marker(f.AtS, f.PredictedS, cs.of(f.To), vg.Points(4), draw.CircleGlyph{})
		if err != nil {
			return nil, err
		}
		p.Add(m)
	}
	for _, c := range used {
		pred = append(pred, cs.of(c))
	}
	p.Legend.Add("predicted (colour: the configuration chosen)", dots{colours: pred, shape: draw.CircleGlyph{}})
	entries := 1
	if finished && r.EndS > 0 {
		a, err := plotter.NewLine(plotter.XYs{{X: 0, Y: r.EndS}, {X: r.EndS, Y: 0}})
		if err != nil {
			return nil, err
		}
		a.Color = black
		p.Add(a)
		p.Legend.Add("actual: the time it took from there", a)
		entries++
	} else {
		p.Title.Text += " (the job has not finished)"
	}
	if len(labels.XYs) > 0 {
		lab, err := plotter.NewLabels(labels)
		if err != nil {
			return nil, err
		}
		for i := range lab.TextStyle {
			lab.TextStyle[i].Font.Size = vg.Points(8)
		}
		lab.Offset = vg.Point{X: vg.Points(6), Y: -vg.Points(3)}
		p.Add(lab)
	}
	p.Y.Min = 0
	roomAbove(&p.Y, legendRoom(entries), false)
	timeAxis(p, r)
	return p, nil
}
