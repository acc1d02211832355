package plot

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/sim"
)

// TestFrontOnTraces draws a real report when SCAV_PLOT names the file.
func TestFrontOnTraces(t *testing.T) {
	out := os.Getenv("SCAV_PLOT")
	if out == "" {
		t.Skip("set SCAV_PLOT=FILE.png")
	}
	dir := os.Getenv("SCAV_TRACES")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared", "traces")
	}
	rep, err := sim.Run(context.Background(), sim.Options{TraceDir: filepath.Join(dir, "deepspeech2"), Objective: objective.Objective{Kind: objective.Cost}, Policy: "adaptive"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Front(rep, out); err != nil {
		t.Fatal(err)
	}
}
