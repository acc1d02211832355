package plot

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

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
