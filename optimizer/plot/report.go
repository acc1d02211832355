package plot

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
)

// JobReport is what the figures of `scavctl report` draw, as plain values:
// the caller (scavctl) fills it from a job's record and step history. Times
// are seconds since the job started.
type JobReport struct {
	// Title names the job.
	Title string
	// Attempts is the timeline of configurations, one span per launch.
	Attempts []Span
	// StepTimes compares, per configuration, the measured step time with
	// a predicted one; PredictedLabel says which prediction.
	StepTimes      []StepTime
	PredictedLabel string
	// Noise is the gradient noise scale (samples) over time.
	Noise []XY
	// Cost is the cumulative cost ($) over time; PredictedCost the cost at
	// the finish that each decision predicted (spent so far plus the
	// prediction), at the time of the decision.
	Cost          []XY
	PredictedCost []XY
	// Candidates are the predictions of one decision (time and cost to
	// finish) that the front is drawn from; CandidatesNote says which one.
	Candidates     []Candidate
	CandidatesNote string
}

// XY is one point of a series.
type XY struct{ X, Y float64 }

// Span is one attempt: when it ran and in which configuration.
type Span struct {
	StartS, EndS float64
	Workers      int
	Batch        int
}

// StepTime is the measured and predicted step time of one configuration
// (0: not known).
type StepTime struct {
	Label      string
	MeasuredS  float64
	PredictedS float64
}

// Candidate is one configuration's predicted time and cost to finish.
type Candidate struct {
	Label   string
	TimeS   float64
	CostUSD float64
	Chosen  bool
}

// Panel is one figure of a report.
type Panel struct {
	// Name is a short file-name-safe name ("timeline", "pareto", ...).
	Name string
	Plot *plot.Plot
}

// Colours shared by the figures.
var (
	grey   = color.Gray{Y: 150}
	blue   = color.RGBA{B: 200, A: 255}
	red    = color.RGBA{R: 220, A: 255}
	green  = color.RGBA{G: 160, A: 255}
	orange = color.RGBA{R: 230, G: 130, A: 255}
)

// Panels draws every figure r has data for, in a fixed order: timeline,
// step time, noise scale, cost, Pareto front. A figure without data (a noise
// series without a positive estimate, say) is left out.
func Panels(r JobReport) ([]Panel, error) {
	type maker struct {
		name string
		ok   bool
		f    func(JobReport) (*plot.Plot, error)
	}
	var out []Panel
	for _, m := range []maker{
		{"timeline", len(r.Attempts) > 0, timelinePlot},
		{"steptime", len(r.StepTimes) > 0, stepTimePlot},
		{"noise", anyPositive(r.Noise), noisePlot},
		{"cost", len(r.Cost) > 0, costPlot},
		{"pareto", len(r.Candidates) > 0, paretoPlot},
	} {
		if !m.ok {
			continue
		}
		p, err := m.f(r)
		if err != nil {
			return nil, fmt.Errorf("draw %s of %s: %w", m.name, r.Title, err)
		}
		out = append(out, Panel{Name: m.name, Plot: p})
	}
	return out, nil
}

// Panel size: a report figure is a grid of these.
const (
	PanelWidth  = 6 * vg.Inch
	PanelHeight = 3.5 * vg.Inch
)

// WritePanel writes one panel as format ("svg" or "png") to w.
func WritePanel(w io.Writer, p Panel, format string) error {
	return writeGrid(w, [][]*plot.Plot{{p.Plot}}, PanelWidth, PanelHeight, format)
}

// WriteFigure writes every panel in one picture, two per row, as format
// ("svg" or "png") to w.
func WriteFigure(w io.Writer, panels []Panel, format string) error {
	if len(panels) == 0 {
		return fmt.Errorf("write figure: %w", ErrNoData)
	}
	const cols = 2
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, p := range panels {
		grid[i/cols][i%cols] = p.Plot
	}
	return writeGrid(w, grid, cols*PanelWidth, vg.Length(rows)*PanelHeight, format)
}

// writeGrid draws a grid of plots (nil leaves a tile empty) on one canvas.
func writeGrid(w io.Writer, grid [][]*plot.Plot, width, height vg.Length, format string) error {
	var (
		canvas vg.CanvasWriterTo
		dc     draw.Canvas
	)
	switch format {
	case "svg":
		c := vgsvg.New(width, height)
		canvas, dc = c, draw.New(c)
	case "png":
		c := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96))
		canvas, dc = vgimg.PngCanvas{Canvas: c}, draw.New(c)
	default:
		return fmt.Errorf("write %s: %w %q (want svg or png)", format, ErrFormat, format)
	}
	// A white background: PNGs are otherwise transparent.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	tiles := draw.Tiles{Rows: len(grid), Cols: len(grid[0]), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(grid, tiles, dc)
	for j, row := range grid {
		for i, p := range row {
			if p != nil {
				p.Draw(canvases[j][i])
			}
		}
	}
	if _, err := canvas.WriteTo(w); err != nil {
		return fmt.Errorf("write %s: %w", format, err)
	}
	return nil
}

// ConfigLabel names a configuration compactly: "K=2 B=64".
func ConfigLabel(workers, batch int) string {
	if batch <= 0 {
		return fmt.Sprintf("K=%d", workers)
	}
	return fmt.Sprintf("K=%d B=%d", workers, batch)
}

// timelinePlot draws each attempt as a bar on its own row, from its start
// to its end, labelled with its configuration: the gaps between bars are the
// relaunches.
func timelinePlot(r JobReport) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Configurations over time"
	p.X.Label.Text = "time since start (s)"
	n := len(r.Attempts)
	var labels plotter.XYLabels
	ticks := make([]plot.Tick, n)
	for i, s := range r.Attempts {
		y := float64(n - 1 - i) // the first attempt on top
		l, err := plotter.NewLine(plotter.XYs{{X: s.StartS, Y: y}, {X: s.EndS, Y: y}})
		if err != nil {
			return nil, fmt.Errorf("attempt %d: %w", i+1, err)
		}
		l.Width = vg.Points(8)
		l.Color = palette(s.Workers - 1)
		p.Add(l)
		labels.XYs = append(labels.XYs, plotter.XY{X: s.StartS, Y: y + 0.3})
		labels.Labels = append(labels.Labels, ConfigLabel(s.Workers, s.Batch))
		ticks[i] = plot.Tick{Value: y, Label: fmt.Sprintf("#%d", i+1)}
	}
	lab, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for i := range lab.TextStyle {
		lab.TextStyle[i].Font.Size = vg.Points(8)
	}
	p.Add(plotter.NewGrid(), lab)
	p.Y.Label.Text = "attempt"
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.1
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min = math.Min(0, p.X.Min)
	return p, nil
}

// stepTimePlot draws, per configuration, the measured step time next to the
// predicted one.
func stepTimePlot(r JobReport) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Step time per configuration"
	p.Y.Label.Text = "step time (ms)"
	meas := make(plotter.Values, len(r.StepTimes))
	pred := make(plotter.Values, len(r.StepTimes))
	names := make([]string, len(r.StepTimes))
	for i, s := range r.StepTimes {
		meas[i], pred[i], names[i] = s.MeasuredS*1e3, s.PredictedS*1e3, s.Label
	}
	w := vg.Points(14)
	mb, err := plotter.NewBarChart(meas, w)
	if err != nil {
		return nil, err
	}
	mb.Color, mb.LineStyle.Width, mb.Offset = blue, 0, -w/2
	pb, err := plotter.NewBarChart(pred, w)
	if err != nil {
		return nil, err
	}
	pb.Color, pb.LineStyle.Width, pb.Offset = orange, 0, w/2
	p.Add(plotter.NewGrid(), mb, pb)
	p.Legend.Add("measured (median)", mb)
	label := r.PredictedLabel
	if label == "" {
		label = "predicted"
	}
	p.Legend.Add(label, pb)
	p.Legend.Top = true
	p.NominalX(names...)
	p.Y.Min = 0
	p.Y.Max *= 1.35 // room for the legend
	return p, nil
}

// noisePlot draws the gradient noise scale over time on a log scale, with
// the global batch the job ran at for comparison (both in samples).
func noisePlot(r JobReport) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Gradient noise scale"
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = "samples (log)"
	var pos plotter.XYs
	for _, q := range r.Noise {
		if q.Y > 0 {
			pos = append(pos, plotter.XY{X: q.X, Y: q.Y})
		}
	}
	if len(pos) == 0 {
		return nil, ErrNoData
	}
	l, err := plotter.NewLine(pos)
	if err != nil {
		return nil, err
	}
	l.Color = green
	p.Add(plotter.NewGrid(), l)
	p.Legend.Add("noise scale B_noise", l)
	var batch plotter.XYs
	for _, s := range r.Attempts {
		if s.Batch > 0 {
			batch = append(batch, plotter.XY{X: s.StartS, Y: float64(s.Batch)}, plotter.XY{X: s.EndS, Y: float64(s.Batch)})
		}
	}
	if len(batch) > 0 {
		b, err := plotter.NewLine(batch)
		if err != nil {
			return nil, err
		}
		b.Color, b.Dashes = grey, []vg.Length{vg.Points(4), vg.Points(2)}
		p.Add(b)
		p.Legend.Add("global batch", b)
	}
	p.Legend.Top = true
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Max *= 3 // room for the legend
	return p, nil
}

// costPlot draws the cumulative cost and each decision's predicted cost at
// the finish.
func costPlot(r JobReport) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Cost"
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = "cost ($)"
	l, err := plotter.NewLine(xys(r.Cost))
	if err != nil {
		return nil, err
	}
	l.Color = blue
	p.Add(plotter.NewGrid(), l)
	p.Legend.Add("spent", l)
	if len(r.PredictedCost) > 0 {
		s, err := plotter.NewScatter(xys(r.PredictedCost))
		if err != nil {
			return nil, err
		}
		s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = orange, vg.Points(3), draw.CircleGlyph{}
		p.Add(s)
		p.Legend.Add("predicted at finish", s)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Y.Min = 0
	return p, nil
}

// paretoPlot draws the candidates' predicted time and cost to finish, their
// Pareto front, and the chosen one.
func paretoPlot(r JobReport) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Candidates: predicted time and cost to finish"
	if r.CandidatesNote != "" {
		p.Title.Text += "\n" + r.CandidatesNote
	}
	p.X.Label.Text = "time to finish (s)"
	p.Y.Label.Text = "cost to finish ($)"
	all := make(plotter.XYs, len(r.Candidates))
	chosen := -1
	for i, c := range r.Candidates {
		all[i] = plotter.XY{X: c.TimeS, Y: c.CostUSD}
		if c.Chosen {
			chosen = i
		}
	}
	cands, front, err := candidatesAndFront(all)
	if err != nil {
		return nil, err
	}
	// Label the front and the chosen one; the rest stay grey dots.
	var labels plotter.XYLabels
	for i, c := range r.Candidates {
		onFront := i == chosen
		for _, f := range front.XYs {
			onFront = onFront || f == all[i]
		}
		if onFront {
			labels.XYs = append(labels.XYs, all[i])
			labels.Labels = append(labels.Labels, c.Label)
		}
	}
	front.LineStyle.Width = vg.Points(1.5)
	frontDots, err := plotter.NewScatter(front.XYs)
	if err != nil {
		return nil, err
	}
	frontDots.GlyphStyle.Color, frontDots.GlyphStyle.Radius, frontDots.GlyphStyle.Shape = blue, vg.Points(2.5), draw.CircleGlyph{}
	lab, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for i := range lab.TextStyle {
		lab.TextStyle[i].Font.Size = vg.Points(7)
		lab.TextStyle[i].XAlign = draw.XLeft
	}
	lab.Offset = vg.Point{X: vg.Points(4), Y: vg.Points(2)}
	p.Add(plotter.NewGrid(), cands, front, frontDots, lab)
	p.Legend.Add("candidates", cands)
	p.Legend.Add("Pareto front", front)
	if chosen >= 0 {
		m, err := marker(all[chosen].X, all[chosen].Y, red, draw.CrossGlyph{})
		if err != nil {
			return nil, err
		}
		p.Add(m)
		p.Legend.Add("chosen "+r.Candidates[chosen].Label, m)
	}
	p.Legend.Top = true
	// Leave room right of the rightmost label and above for the legend.
	pad := func(lo, hi *float64, below, above float64) {
		span := *hi - *lo
		if span <= 0 {
			span = math.Max(math.Abs(*hi), 1e-9)
		}
		*lo -= below * span
		*hi += above * span
	}
	pad(&p.X.Min, &p.X.Max, 0.05, 0.2)
	pad(&p.Y.Min, &p.Y.Max, 0.05, 0.45)
	return p, nil
}

// candidatesAndFront draws points as grey dots and their time–cost Pareto
// front (objective.Pareto) as a blue line: the simulator's picture and the
// report's share it.
func candidatesAndFront(all plotter.XYs) (*plotter.Scatter, *plotter.Line, error) {
	cands, err := plotter.NewScatter(all)
	if err != nil {
		return nil, nil, err
	}
	cands.GlyphStyle.Color = grey
	cands.GlyphStyle.Radius = vg.Points(2.5)
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
	line.Color = blue
	return cands, line, nil
}

// marker is one large glyph at (x, y).
func marker(x, y float64, c color.Color, shape draw.GlyphDrawer) (*plotter.Scatter, error) {
	s, err := plotter.NewScatter(plotter.XYs{{X: x, Y: y}})
	if err != nil {
		return nil, err
	}
	s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = c, vg.Points(5), shape
	return s, nil
}

// anyPositive reports whether a point of v has Y > 0 (can go on a log scale).
func anyPositive(v []XY) bool {
	for _, p := range v {
		if p.Y > 0 {
			return true
		}
	}
	return false
}

func xys(v []XY) plotter.XYs {
	out := make(plotter.XYs, len(v))
	for i, p := range v {
		out[i] = plotter.XY{X: p.X, Y: p.Y}
	}
	return out
}

// palette gives the i-th attempt's colour.
func palette(i int) color.Color {
	cs := []color.Color{blue, orange, green, red, color.RGBA{R: 120, B: 160, A: 255}, color.RGBA{G: 120, B: 120, A: 255}}
	return cs[i%len(cs)]
}
