package plot

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"gonum.org/v1/plot"

	"github.com/scavenger-ml/scavenger/optimizer/sim"
)

func report() *sim.Report {
	return &sim.Report{
		App: "tiny", Policy: "adaptive", Objective: "time", JCTS: 7200, CostUSD: 12, Relaunches: 2,
		Oracle: sim.Outcome{Type: "aws", Workers: 4, Batch: 64, JCTS: 3600, CostUSD: 10},
		Front: []sim.Outcome{
			{JCTS: 3600, CostUSD: 10}, {JCTS: 7200, CostUSD: 6}, {JCTS: 10800, CostUSD: 5}, {JCTS: 9000, CostUSD: 20},
		},
	}
}

func TestFront(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"front.svg", "front.png"} {
		path := filepath.Join(dir, name)
		if err := Front(report(), path); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if st, err := os.Stat(path); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if err := Front(report(), filepath.Join(dir, "front.gif")); !errors.Is(err, ErrFormat) {
		t.Fatalf("gif: %v", err)
	}
	if err := Front(&sim.Report{}, filepath.Join(dir, "x.svg")); err == nil {
		t.Fatal("empty report accepted")
	}
}

// TestFrontIsReadable: the simulation's picture labels its log axes often
// enough to read (at least three labels on each), names the oracle in the
// one notation, and keeps the top of the panel, where the legend is, clear
// of every point.
func TestFrontIsReadable(t *testing.T) {
	rep := report()
	rep.Front = append(rep.Front, sim.Outcome{JCTS: 5000, CostUSD: 21}, sim.Outcome{JCTS: 10000, CostUSD: 4})
	p, err := frontPlot(rep)
	if err != nil {
		t.Fatal(err)
	}
	for name, ax := range map[string]*plot.Axis{"X": &p.X, "Y": &p.Y} {
		n := 0
		for _, tk := range ax.Tick.Marker.Ticks(ax.Min, ax.Max) {
			if tk.Label != "" {
				n++
			}
		}
		if n < 3 {
			t.Errorf("%s axis %v..%v has %d labels, want at least 3", name, ax.Min, ax.Max, n)
		}
	}
	top := 21.0 // the highest point
	if free := math.Log(p.Y.Max/top) / math.Log(p.Y.Max/p.Y.Min); free < legendRoom(4)*0.99 {
		t.Errorf("the legend's part of the panel is %.2f of its height, but the points reach into it (%.2f free)", legendRoom(4), free)
	}
}
