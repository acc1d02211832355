package plot

import (
	"image/color"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// This file holds what the panels share so that they read alike: one
// colour per configuration, black and grey for everything else (predicted
// against measured told apart by glyph and line), the glyphs and legend
// thumbnails, and the room a legend needs.

// Colours that mean no configuration.
var (
	black    = color.Black
	grey     = color.Gray{Y: 150}
	darkGrey = color.Gray{Y: 90}
	// lightGrey is for what is shown as context: single noisy estimates.
	lightGrey = color.Gray{Y: 190}
)

// configPalette gives configurations their colours, in order of first
// appearance (Tableau 10 without its grey, which means "never ran").
var configPalette = []color.Color{
	color.RGBA{R: 0x4e, G: 0x79, B: 0xa7, A: 255}, // blue
	color.RGBA{R: 0xf2, G: 0x8e, B: 0x2b, A: 255}, // orange
	color.RGBA{R: 0x59, G: 0xa1, B: 0x4f, A: 255}, // green
	color.RGBA{R: 0xe1, G: 0x57, B: 0x59, A: 255}, // red
	color.RGBA{R: 0xb0, G: 0x7a, B: 0xa1, A: 255}, // purple
	color.RGBA{R: 0x76, G: 0xb7, B: 0xb2, A: 255}, // teal
	color.RGBA{R: 0x9c, G: 0x75, B: 0x5f, A: 255}, // brown
	color.RGBA{R: 0xed, G: 0xc9, B: 0x48, A: 255}, // yellow
	color.RGBA{R: 0xff, G: 0x9d, B: 0xa7, A: 255}, // pink
}

// colours maps the configurations a job ran (or was measured, predicted or
// moved to) to their colours; order lists them in order of first appearance.
type colours struct {
	byConfig map[Config]color.Color
	order    []Config
}

// colourConfigs gives each configuration of r's timeline, step times,
// throughput and finishes a palette colour, in order of first appearance
// (the palette repeats past its length). A candidate that never ran has
// none: it is grey.
func colourConfigs(r JobReport) colours {
	cs := colours{byConfig: map[Config]color.Color{}}
	add := func(c Config) {
		if _, ok := cs.byConfig[c]; !ok {
			cs.byConfig[c] = configPalette[len(cs.order)%len(configPalette)]
			cs.order = append(cs.order, c)
		}
	}
	for _, s := range r.Attempts {
		add(s.Config)
	}
	for _, s := range r.StepTimes {
		add(s.Config)
	}
	for _, s := range r.Throughput {
		add(s.Config)
	}
	for _, f := range r.Finishes {
		add(f.To)
	}
	return cs
}

// of is c's colour (grey: a configuration that never ran).
func (cs colours) of(c Config) color.Color {
	if col, ok := cs.byConfig[c]; ok {
		return col
	}
	return grey
}

// ran reports whether c has a colour of its own.
func (cs colours) ran(c Config) bool {
	_, ok := cs.byConfig[c]
	return ok
}

// tickGlyph is a short thick horizontal bar: a predicted value across a
// measured bar.
type tickGlyph struct{}

// DrawGlyph implements draw.GlyphDrawer.
func (tickGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	w := sty.Radius * 2.2
	c.StrokeLine2(draw.LineStyle{Color: sty.Color, Width: vg.Points(2.5)}, pt.X-w, pt.Y, pt.X+w, pt.Y)
}

// arrowGlyph is a filled triangle pointing right (Up: up): a point beyond
// the edge of the axis it sits on.
type arrowGlyph struct{ Up bool }

// DrawGlyph implements draw.GlyphDrawer.
func (g arrowGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	r := sty.Radius
	tri := []vg.Point{{X: pt.X - r, Y: pt.Y - r}, {X: pt.X + r, Y: pt.Y}, {X: pt.X - r, Y: pt.Y + r}}
	if g.Up {
		tri = []vg.Point{{X: pt.X - r, Y: pt.Y - r}, {X: pt.X, Y: pt.Y + r}, {X: pt.X + r, Y: pt.Y - r}}
	}
	c.FillPolygon(sty.Color, c.ClipPolygonXY(tri))
}

// swatch is a legend thumbnail of a box filled with fills side by side
// (the configurations' colours: "coloured by configuration"), outlined.
type swatch struct {
	fills []color.Color
	line  color.Color
}

// Thumbnail implements plot.Thumbnailer.
func (s swatch) Thumbnail(c *draw.Canvas) {
	r := c.Rectangle
	box := func(x0, x1 vg.Length) []vg.Point {
		return []vg.Point{{X: x0, Y: r.Min.Y}, {X: x0, Y: r.Max.Y}, {X: x1, Y: r.Max.Y}, {X: x1, Y: r.Min.Y}}
	}
	n := min(len(s.fills), 3)
	w := (r.Max.X - r.Min.X) / vg.Length(max(n, 1))
	for i := range n {
		c.FillPolygon(s.fills[i], box(r.Min.X+vg.Length(i)*w, r.Min.X+vg.Length(i+1)*w))
	}
	pts := box(r.Min.X, r.Max.X)
	c.StrokeLines(draw.LineStyle{Color: s.line, Width: vg.Points(0.8)}, append(pts, pts[0]))
}

// dots is a legend thumbnail of a row of glyphs in the configurations'
// colours: "coloured by configuration".
type dots struct {
	colours []color.Color
	shape   draw.GlyphDrawer
}

// Thumbnail implements plot.Thumbnailer.
func (d dots) Thumbnail(c *draw.Canvas) {
	n := min(len(d.colours), 3)
	if n == 0 {
		d.colours, n = []color.Color{grey}, 1
	}
	w := c.Max.X - c.Min.X
	for i := range n {
		x := c.Min.X + w*vg.Length(2*i+1)/vg.Length(2*n)
		c.DrawGlyph(draw.GlyphStyle{Color: d.colours[i], Radius: vg.Points(3), Shape: d.shape}, vg.Point{X: x, Y: c.Center().Y})
	}
}

// firstColours are the colours of the first configurations of cs.
func (cs colours) firstColours() []color.Color {
	var out []color.Color
	for _, c := range cs.order {
		out = append(out, cs.byConfig[c])
	}
	return out
}

// marker is one glyph at (x, y).
func marker(x, y float64, c color.Color, radius vg.Length, shape draw.GlyphDrawer) (*plotter.Scatter, error) {
	return glyphs(plotter.XYs{{X: x, Y: y}}, c, radius, shape)
}

// glyphs draws pts as glyphs.
func glyphs(pts plotter.XYs, c color.Color, radius vg.Length, shape draw.GlyphDrawer) (*plotter.Scatter, error) {
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, err
	}
	s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = c, radius, shape
	return s, nil
}

// newPlot is a panel with its title, axis labels, a grid and its legend at
// the top right, in a smaller font than gonum's.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Legend.Top = true
	p.Legend.ThumbnailWidth = vg.Points(22)
	p.X.Tick.Marker, p.Y.Tick.Marker = plainTicks{}, plainTicks{}
	p.Add(plotter.NewGrid())
	return p
}

// plainTicks are gonum's default ticks with the trailing zeros of their
// labels dropped: "25", not "25.00".
type plainTicks struct{}

// Ticks implements plot.Ticker.
func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i, t := range ts {
		if strings.Contains(t.Label, ".") && !strings.ContainsAny(t.Label, "eE") {
			ts[i].Label = strings.TrimRight(strings.TrimRight(t.Label, "0"), ".")
		}
	}
	return ts
}

// roomAbove raises the top of axis a (after the data set it) so that the
// top frac of it is free for the legend; on a log scale in proportion.
func roomAbove(a *plot.Axis, frac float64, log bool) {
	frac = math.Min(frac, 0.6)
	if log && a.Min > 0 && a.Max > a.Min {
		a.Max *= math.Pow(a.Max/a.Min, frac/(1-frac))
		return
	}
	span := a.Max - a.Min
	if span <= 0 {
		span = math.Max(math.Abs(a.Max), 1)
	}
	a.Max += span * frac / (1 - frac)
}

// legendRoom is the part of a panel's height a legend of n entries takes.
func legendRoom(n int) float64 { return 0.02 + 0.085*float64(n) }

// timeAxis makes the X axis of a time panel run from 0 to the job's end.
func timeAxis(p *plot.Plot, r JobReport) {
	p.X.Min = math.Min(0, p.X.Min)
	if r.EndS > 0 {
		p.X.Max = math.Max(p.X.Max, r.EndS)
	}
}

func xys(v []XY) plotter.XYs {
	out := make(plotter.XYs, len(v))
	for i, p := range v {
		out[i] = plotter.XY{X: p.X, Y: p.Y}
	}
	return out
}
