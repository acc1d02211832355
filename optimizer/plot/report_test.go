package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// jobReport is a job that probed four configurations and settled on K=2 B=256.
func jobReport() JobReport {
	r := JobReport{
		Title: "cnn-a0f330",
		Attempts: []Span{
			{StartS: 0.2, EndS: 2.9, Workers: 1, Batch: 32},
			{StartS: 4.3, EndS: 7.9, Workers: 1, Batch: 256},
			{StartS: 11.0, EndS: 14.3, Workers: 2, Batch: 32},
			{StartS: 15.7, EndS: 85.6, Workers: 2, Batch: 256},
		},
		StepTimes: []StepTime{
			{Label: "K=1 B=32", MeasuredS: 0.0126, PredictedS: 0.0133},
			{Label: "K=1 B=256", MeasuredS: 0.0986, PredictedS: 0.0951},
			{Label: "K=2 B=32", MeasuredS: 0.0122, PredictedS: 0.0123},
			{Label: "K=2 B=256", MeasuredS: 0.0927, PredictedS: 0.0637},
		},
		PredictedLabel: "predicted by the model at step 230",
		Cost:           []XY{{0, 0}, {85.6, 0.0238}},
		PredictedCost:  []XY{{18, 0.0157}},
		Candidates: []Candidate{
			{Label: "K=1 B=32", TimeS: 64.3, CostUSD: 0.0179},
			{Label: "K=1 B=64", TimeS: 61.5, CostUSD: 0.0171},
			{Label: "K=2 B=64", TimeS: 47.0, CostUSD: 0.0130},
			{Label: "K=2 B=128", TimeS: 39.8, CostUSD: 0.0111},
			{Label: "K=2 B=256", TimeS: 38.5, CostUSD: 0.0107, Chosen: true},
		},
		CandidatesNote: "decision at step 230, objective time",
	}
	for i := 0; i < 50; i++ {
		t := 1 + float64(i)*1.7
		r.Noise = append(r.Noise, XY{X: t, Y: 200 + 8*t})
	}
	return r
}

func TestReportPanelsGolden(t *testing.T) {
	panels, err := Panels(jobReport())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range panels {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, " "); got != "timeline steptime noise cost pareto" {
		t.Fatalf("panels %q", got)
	}
	var svg bytes.Buffer
	if err := WriteFigure(&svg, panels, "svg"); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, svg.Bytes())
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
	for _, p := range panels {
		var b bytes.Buffer
		if err := WritePanel(&b, p, "svg"); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		checkSVG(t, b.Bytes())
	}
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
	panels, err := Panels(jobReport())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteFigure(&b, panels, "png"); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatalf("PNG does not decode: %v", err)
	}
	// Three rows of two panels at 96 dpi.
	if s := img.Bounds().Size(); s.X != 2*6*96 || s.Y != 3*int(3.5*96) {
		t.Errorf("PNG is %v", s)
	}
}

func TestReportPanelsLeaveOutWhatHasNoData(t *testing.T) {
	r := JobReport{Title: "fixed", Attempts: []Span{{StartS: 0, EndS: 10, Workers: 1, Batch: 32}},
		StepTimes: []StepTime{{Label: "K=1 B=32", MeasuredS: 0.01}}, Cost: []XY{{0, 0}, {10, 0.01}},
		Noise: []XY{{1, -5}}} // an estimate that is not positive cannot go on a log scale
	panels, err := Panels(r)
	if err != nil || len(panels) != 3 {
		t.Fatalf("%d panels, %v: want timeline, step time and cost", len(panels), err)
	}
	var b bytes.Buffer
	if err := WriteFigure(&b, panels, "svg"); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, b.Bytes())
	if err := WriteFigure(&b, panels, "gif"); !errors.Is(err, ErrFormat) {
		t.Errorf("gif: %v", err)
	}
	if err := WriteFigure(&b, nil, "svg"); !errors.Is(err, ErrNoData) {
		t.Errorf("no panels: %v", err)
	}
}
