package plot

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Figure is a report's whole picture: a heading over its panels.
type Figure struct {
	// Title and Subtitle are the heading's two lines.
	Title, Subtitle string
	Panels          []Panel
}

// NewFigure is r's figure: its heading and every panel it has data for.
func NewFigure(r JobReport) (Figure, error) {
	panels, err := Panels(r)
	if err != nil {
		return Figure{}, err
	}
	return Figure{Title: r.Title, Subtitle: r.Subtitle, Panels: panels}, nil
}

// Panel size: a report figure is a grid of these.
const (
	PanelWidth  = 6 * vg.Inch
	PanelHeight = 3.5 * vg.Inch
	// HeadingHeight is the height of a figure's heading.
	HeadingHeight = 0.75 * vg.Inch
)

// WritePanel writes one panel as format ("svg" or "png") to w.
func WritePanel(w io.Writer, p Panel, format string) error {
	return writeCanvas(w, PanelWidth, PanelHeight, format, func(dc draw.Canvas) {
		p.Plot.Draw(dc)
	})
}

// WriteFigure writes f as format ("svg" or "png") to w: its heading, then
// its panels two to a row (Layout), with no empty tile.
func WriteFigure(w io.Writer, f Figure, format string) error {
	if len(f.Panels) == 0 {
		return fmt.Errorf("write figure %s: %w", f.Title, ErrNoData)
	}
	rows := Layout(len(f.Panels))
	height := HeadingHeight + vg.Length(len(rows))*PanelHeight
	return writeCanvas(w, 2*PanelWidth, height, format, func(dc draw.Canvas) {
		heading(dc, f.Title, f.Subtitle)
		body := dc
		body.Max.Y -= HeadingHeight
		// A lone panel spans the first row; the pairs below share aligned columns.
		if len(rows[0]) == 1 {
			top := body
			top.Min.Y = top.Max.Y - PanelHeight
			drawRow(top, []*plot.Plot{f.Panels[rows[0][0]].Plot})
			body.Max.Y = top.Min.Y
			rows = rows[1:]
		}
		if len(rows) == 0 {
			return
		}
		grid := make([][]*plot.Plot, len(rows))
		for i, row := range rows {
			for _, k := range row {
				grid[i] = append(grid[i], f.Panels[k].Plot)
			}
		}
		canvases := plot.Align(grid, tiles(len(grid), 2), body)
		for i, row := range grid {
			for j, p := range row {
				p.Draw(canvases[i][j])
			}
		}
	})
}

// Layout places n panels in rows of two: with an odd n the first panel
// (the timeline) has a row of its own, the width of the figure, so that
// no tile is left empty. Each row lists the indices of its panels.
func Layout(n int) [][]int {
	var rows [][]int
	i := 0
	if n%2 == 1 {
		rows, i = append(rows, []int{0}), 1
	}
	for ; i+1 < n; i += 2 {
		rows = append(rows, []int{i, i + 1})
	}
	return rows
}

// tiles is the padding of a figure's grid.
func tiles(rows, cols int) draw.Tiles {
	return draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 5,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 3}
}

// drawRow draws plots side by side on c.
func drawRow(c draw.Canvas, plots []*plot.Plot) {
	canvases := plot.Align([][]*plot.Plot{plots}, tiles(1, len(plots)), c)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
}

// heading writes a figure's title and subtitle, centred, at the top of c.
func heading(c draw.Canvas, title, subtitle string) {
	style := func(size vg.Length) text.Style {
		return text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, size), XAlign: draw.XCenter,
			YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
	}
	x := c.Center().X
	y := c.Max.Y - vg.Millimeter*3
	t := style(18)
	c.FillText(t, vg.Point{X: x, Y: y}, title)
	if subtitle != "" {
		c.FillText(style(12), vg.Point{X: x, Y: y - t.Rectangle(title).Size().Y - vg.Millimeter*1.5}, subtitle)
	}
}

// writeCanvas draws on a white canvas of the size given with paint and
// writes it as format ("svg" or "png") to w.
func writeCanvas(w io.Writer, width, height vg.Length, format string, paint func(draw.Canvas)) error {
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
	paint(dc)
	if _, err := canvas.WriteTo(w); err != nil {
		return fmt.Errorf("write %s: %w", format, err)
	}
	return nil
}
