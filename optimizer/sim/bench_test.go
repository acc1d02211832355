package sim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

func tracesDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("SCAV_TRACES")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared", "traces")
	}
	if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
		t.Skipf("traces not found at %s (set SCAV_TRACES)", dir)
	}
	return dir
}

// TestBenchTable regenerates the bench table when SCAV_BENCH_SIM names the
// output file (make bench-sim).
func TestBenchTable(t *testing.T) {
	out := os.Getenv("SCAV_BENCH_SIM")
	if out == "" {
		t.Skip("set SCAV_BENCH_SIM=FILE to regenerate the bench table")
	}
	var b bytes.Buffer
	if err := BenchTable(context.Background(), os.DirFS(tracesDir(t)), &b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s:\n%s", out, b.String())
}

func TestMeasureDecision(t *testing.T) {
	d, n, err := MeasureDecision("knee", 3)
	if err != nil {
		t.Fatal(err)
	}
	if n < 10000 || d <= 0 {
		t.Fatalf("%d candidates in %v", n, d)
	}
}
