package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// jobReport is a job that probed four configurations and settled on K=2
// B=256, at an assumed price; one candidate's forecast is far beyond the
// others'.
func jobReport() JobReport {
	k1b32, k1b256, k2b32, k2b256 := Config{Workers: 1, Batch: 32}, Config{Workers: 1, Batch: 256}, Config{Workers: 2, Batch: 32}, Config{Workers: 2, Batch: 256}
	r := JobReport{
		Title:    "Job cnn-a0f330 (succeeded)",
		Subtitle: "policy scavenger, objective time; 4 attempt(s), 3 relaunch(es) taking 4.5 s; 1m25.6s at an assumed $1.00/h: $0.0238",
		EndS:     85.6,
		Attempts: []Span{
			{StartS: 0.2, EndS: 2.9, Config: k1b32, End: EndProbe},
			{StartS: 4.3, EndS: 7.9, Config: k1b256, End: EndProbe},
			{StartS: 11.0, EndS: 14.3, Config: k2b32, End: EndMove},
			{StartS: 15.7, EndS: 85.6, Config: k2b256, End: EndFinish},
		},
		StepTimes: []StepTime{
			{Config: k1b32, MeasuredS: 0.0126, ModelS: 0.0133},
			{Config: k1b256, MeasuredS: 0.0986, ModelS: 0.0951},
			{Config: k2b32, MeasuredS: 0.0122, ModelS: 0.0123},
			{Config: k2b256, MeasuredS: 0.0927, ChosenS: 0.0637, ModelS: 0.0637},
		},
		ModelLabel:    "predicted by the model at step 230",
		Cost:          []XY{{0, 0}, {85.6, 0.0238}},
		PredictedCost: []XY{{18, 0.0157}},
		Finishes:      []Finish{{AtS: 15, To: k2b256, PredictedS: 60, TookS: 70.6}},
		Candidates: []Candidate{
			{Config: k1b32, TimeS: 64.3, CostUSD: 0.0179},
			{Config: Config{Workers: 1, Batch: 64}, TimeS: 61.5, CostUSD: 0.0171},
			{Config: Config{Workers: 2, Batch: 64}, TimeS: 47.0, CostUSD: 0.0130},
			{Config: Config{Workers: 2, Batch: 128}, TimeS: 39.8, CostUSD: 0.0111},
			{Config: k2b256, TimeS: 38.5, CostUSD: 0.0107, Chosen: true},
			{Config: k1b256, TimeS: 4100, CostUSD: 1.14}, // far beyond: at the edge
		},
		CandidatesNote: "decision at step 230, objective time",
	}
	for i, s := range r.Attempts {
		for t := s.StartS + 0.5; t <= s.EndS; t += 0.5 {
			if len(r.Throughput) <= i {
				r.Throughput = append(r.Throughput, Segment{Config: s.Config})
			}
			r.Throughput[i].Points = append(r.Throughput[i].Points, XY{t, float64(s.Batch) / (0.01 * float64(s.Batch) / float64(s.Workers))})
			r.Loss = append(r.Loss, XY{t, 2.3 / (1 + t/20)})
		}
	}
	for i := 0; i < 50; i++ {
		t := 1 + float64(i)*1.7
		r.Noise = append(r.Noise, XY{X: t, Y: 200 + 8*t})
	}
	return r
}

func TestReportPanelsGolden(t *testing.T) {
	f, err := NewFigure(jobReport())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range f.Panels {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, " "); got != "timeline steptime throughput loss noise cost finish pareto" {
		t.Fatalf("panels %q", got)
	}
	var svg bytes.Buffer
	if err := WriteFigure(&svg, f, "svg"); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, svg.Bytes())
	for _, want := range []string{"Job cnn-a0f330 (succeeded)", "assumed $1.00/h", "ended for a probe", "finished",
		"predicted when chosen", "beyond the axis", "1x256: 4100 s", "actual: the time it took"} {
		if !bytes.Contains(svg.Bytes(), []byte(xmlText(want))) {
			t.Errorf("the figure does not say %q", want)
		}
	}
	golden := filepath.Join("testdata", "report.svg")
	if *update {
		if err := os.WriteFile(golden, svg.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestReportPanelsGolden -update)", err)
	}
	if !bytes.Equal(want, svg.Bytes()) {
		t.Errorf("the report figure differs from %s (rerun with -update if the change is intended; look at it first)", golden)
	}
	for _, p := range f.Panels {
		var b bytes.Buffer
		if err := WritePanel(&b, p, "svg"); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		checkSVG(t, b.Bytes())
	}
}

// xmlText is s as an SVG document writes it.
func xmlText(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// checkSVG parses an SVG document whole and checks that it draws something.
func checkSVG(t *testing.T, b []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	elems, root := 0, ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG does not parse: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			elems++
		}
	}
	if root != "svg" || elems < 20 {
		t.Fatalf("SVG root %q with %d elements", root, elems)
	}
}

func TestReportPNG(t *testing.T) {
	for _, c := range []struct {
		name string
		r    JobReport
		rows int
	}{
		{"eight panels, four rows", jobReport(), 4},
		{"seven panels: the timeline spans the first row", func() JobReport { r := jobReport(); r.Loss = nil; return r }(), 4},
		{"one panel", JobReport{Title: "pending", Attempts: []Span{{EndS: 1, Config: Config{Workers: 1, Batch: 8}}}}, 1},
	} {
		f, err := NewFigure(c.r)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := WriteFigure(&b, f, "png"); err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(&b)
		if err != nil {
			t.Fatalf("%s: PNG does not decode: %v", c.name, err)
		}
		// Two panels wide at 96 dpi, the heading over the rows.
		if s := img.Bounds().Size(); s.X != 2*6*96 || s.Y != int(0.75*96)+c.rows*int(3.5*96) {
			t.Errorf("%s: PNG is %v", c.name, s)
		}
	}
}

func TestPanelNames(t *testing.T) {
	full := jobReport()
	for _, c := range []struct {
		name string
		edit func(*JobReport)
		want string
	}{
		{"everything", func(*JobReport) {}, "timeline steptime throughput loss noise cost finish pareto"},
		{"no price: no cost panel", func(r *JobReport) { r.NoPrice = true },
			"timeline steptime throughput loss noise finish pareto"},
		{"no cost series", func(r *JobReport) { r.Cost = nil }, "timeline steptime throughput loss noise finish pareto"},
		{"a noise estimate that cannot go on a log scale", func(r *JobReport) { r.Noise = []XY{{1, -5}, {2, 0}} },
			"timeline steptime throughput loss cost finish pareto"},
		{"step times not known", func(r *JobReport) { r.StepTimes = []StepTime{{Config: Config{Workers: 1, Batch: 32}}} },
			"timeline throughput loss noise cost finish pareto"},
		{"throughput of no samples", func(r *JobReport) {
			r.Throughput = []Segment{{Config: Config{Workers: 1, Batch: 32}, Points: []XY{{1, 0}}}}
		},
			"timeline steptime loss noise cost finish pareto"},
		{"no decision predicted: no finish, no candidates", func(r *JobReport) { r.Finishes, r.Candidates = nil, nil },
			"timeline steptime throughput loss noise cost"},
		{"a job that has not started", func(r *JobReport) { *r = JobReport{Title: r.Title} }, ""},
	} {
		r := full
		c.edit(&r)
		if got := strings.Join(PanelNames(r), " "); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		panels, err := Panels(r)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(panels) != len(PanelNames(r)) {
			t.Errorf("%s: %d panels drawn for %d names", c.name, len(panels), len(PanelNames(r)))
		}
	}
}

func TestLayout(t *testing.T) {
	for _, c := range []struct {
		n    int
		want [][]int
	}{
		{0, nil},
		{1, [][]int{{0}}},
		{2, [][]int{{0, 1}}},
		{3, [][]int{{0}, {1, 2}}},
		{7, [][]int{{0}, {1, 2}, {3, 4}, {5, 6}}},
		{8, [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
	} {
		if got := Layout(c.n); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Layout(%d) = %v, want %v", c.n, got, c.want)
		}
	}
}

func TestColourConfigs(t *testing.T) {
	a, b, c, never := Config{Workers: 1, Batch: 32}, Config{Workers: 2, Batch: 64}, Config{Workers: 4, Batch: 128}, Config{Workers: 8, Batch: 8}
	many := JobReport{}
	for i := range len(configPalette) + 1 {
		many.Attempts = append(many.Attempts, Span{Config: Config{Workers: i + 1, Batch: 8}})
	}
	for _, tc := range []struct {
		name string
		r    JobReport
		want map[Config]color.Color
	}{
		{"in order of first appearance, a configuration run twice keeps its colour",
			JobReport{Attempts: []Span{{Config: b}, {Config: a}, {Config: b}}},
			map[Config]color.Color{b: configPalette[0], a: configPalette[1], never: grey}},
		{"step times, throughput and finishes after the timeline",
			JobReport{Attempts: []Span{{Config: a}}, StepTimes: []StepTime{{Config: b}}, Throughput: []Segment{{Config: a}},
				Finishes: []Finish{{To: c}}, Candidates: []Candidate{{Config: never}}},
			map[Config]color.Color{a: configPalette[0], b: configPalette[1], c: configPalette[2], never: grey}},
		{"past the palette it repeats", many,
			map[Config]color.Color{{Workers: 1, Batch: 8}: configPalette[0], {Workers: len(configPalette) + 1, Batch: 8}: configPalette[0]}},
	} {
		cs := colourConfigs(tc.r)
		for cfg, want := range tc.want {
			if got := cs.of(cfg); got != want {
				t.Errorf("%s: %s is %v, want %v", tc.name, cfg.Label(), got, want)
			}
		}
	}
}

func TestFitAxis(t *testing.T) {
	for _, c := range []struct {
		name   string
		vs     []float64
		keep   float64
		want   axisRange
		beyond int
	}{
		{"nothing", nil, 0, axisRange{}, 0},
		{"too few to call one far", []float64{1, 2, 900}, 0, axisRange{Lo: 1, Hi: 900, Log: true}, 0},
		{"close values all shown", []float64{123, 53, 55, 64, 67, 70, 85, 103}, 53, axisRange{Lo: 53, Hi: 123}, 0},
		{"one far value left at the edge", []float64{40, 38, 47, 61, 64, 4100}, 38, axisRange{Lo: 38, Hi: 64}, 1},
		{"equal values and a far one", []float64{1, 1, 1, 1, 100}, 1, axisRange{Lo: 1, Hi: 1}, 1},
		{"a little above equal values is not far", []float64{1, 1, 1, 1, 1.5}, 1, axisRange{Lo: 1, Hi: 1.5}, 0},
		{"the chosen one is never cut", []float64{40, 38, 47, 61, 64, 4100}, 4100, axisRange{Lo: 38, Hi: 4100, Log: true}, 0},
		{"values over decades: a log scale", []float64{1, 10, 100, 1000}, 0, axisRange{Lo: 1, Hi: 1000, Log: true}, 0},
	} {
		got := fitAxis(c.vs, c.keep)
		if got != c.want || got.beyond(c.vs) != c.beyond {
			t.Errorf("%s: %+v with %d beyond, want %+v with %d", c.name, got, got.beyond(c.vs), c.want, c.beyond)
		}
		for _, v := range c.vs {
			if s := got.clamp(v); s < got.Lo || (v <= got.Hi && s != v) || (v > got.Hi && !(s > got.Hi && s < v)) {
				t.Errorf("%s: %v drawn at %v", c.name, v, s)
			}
		}
	}
}

func TestWriteFigureErrors(t *testing.T) {
	f, err := NewFigure(JobReport{Title: "fixed", Attempts: []Span{{StartS: 0, EndS: 10, Config: Config{Workers: 1, Batch: 32}}}})
	if err != nil || len(f.Panels) != 1 {
		t.Fatalf("%d panels, %v: want the timeline", len(f.Panels), err)
	}
	var b bytes.Buffer
	if err := WriteFigure(&b, f, "gif"); !errors.Is(err, ErrFormat) {
		t.Errorf("gif: %v", err)
	}
	if err := WriteFigure(&b, Figure{Title: "empty"}, "svg"); !errors.Is(err, ErrNoData) {
		t.Errorf("no panels: %v", err)
	}
}

func TestPlainTicks(t *testing.T) {
	for _, c := range []struct {
		min, max float64
		want     []string
	}{
		{23.7, 77, []string{"25", "50", "75"}},
		{0, 0.06, []string{"0", "0.03", "0.06"}},
		{0.0105, 0.0245, []string{"0.012", "0.016", "0.02", "0.024"}},
	} {
		var got []string
		for _, tk := range (plainTicks{}).Ticks(c.min, c.max) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ticks of [%v, %v]: %q, want %q", c.min, c.max, got, c.want)
		}
	}
}

func TestSplitAtRelaunches(t *testing.T) {
	spans := []Span{{StartS: 0, EndS: 10}, {StartS: 12, EndS: 20}, {StartS: 22, EndS: 30}}
	pts := plotter.XYs{{X: 1}, {X: 5}, {X: 9}, {X: 25}, {X: 26}}
	got := splitAtRelaunches(pts, spans)
	want := []plotter.XYs{{{X: 1}, {X: 5}, {X: 9}}, {{X: 25}, {X: 26}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%v, want %v: no line across the attempts without estimates", got, want)
	}
	if got := splitAtRelaunches(pts, nil); len(got) != 1 || len(got[0]) != len(pts) {
		t.Errorf("without attempts: %v, want one run", got)
	}
}

func TestLogTicks(t *testing.T) {
	for _, tt := range []struct {
		min, max float64
		want     []string
	}{
		{0.03, 1.2, []string{"0.05", "0.1", "0.2", "0.5", "1"}},
		{1.5, 120, []string{"2", "5", "10", "20", "50", "100"}},
		{30, 80, []string{"30", "40", "50", "60", "70", "80"}}, // fewer than three at 1, 2, 5: every mark
		{100, 2e7, []string{"100", "1000", "10k", "100k", "1M", "10M"}},
	} {
		var got []string
		for _, tk := range (logTicks{}).Ticks(tt.min, tt.max) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("labels of [%v, %v] = %q, want %q", tt.min, tt.max, got, tt.want)
		}
	}
}

// TestNoisePanelShowsTheBulk: single steps' noise estimates that read 100
// times the rest neither stretch the axis nor hide the trend: the axis
// spans the bulk, the outliers sit on its edge (the legend counts them),
// and the line is their running median.
func TestNoisePanelShowsTheBulk(t *testing.T) {
	r := jobReport()
	r.Noise = nil
	for i := range 160 {
		y := 300 + 2*float64(i)
		if i%23 == 5 {
			y = 80000
		}
		r.Noise = append(r.Noise, XY{X: 1 + float64(i)*0.5, Y: y})
	}
	p, err := noisePlot(r, colours{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Y.Max > 5000 || p.Y.Min > 32 {
		t.Errorf("Y axis %v..%v: want the bulk (300..620) and the batches (32..256), not the outliers", p.Y.Min, p.Y.Max)
	}
	var b bytes.Buffer
	if err := WritePanel(&b, Panel{Name: "noise", Plot: p}, "svg"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"running median of 9", "7 beyond the axis, on its edge"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the noise panel does not say %q", want)
		}
	}
	m := runningMedian(plotter.XYs{{Y: 1}, {Y: 100}, {Y: 2}, {Y: 3}, {Y: 1000}, {Y: 4}}, 3)
	if got := []float64{m[0].Y, m[1].Y, m[2].Y, m[3].Y, m[4].Y, m[5].Y}; fmt.Sprint(got) != "[100 2 3 3 4 1000]" {
		t.Errorf("running median = %v", got)
	}
}
