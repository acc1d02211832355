package sim

import (
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
	cells, err := Bench(context.Background(), os.DirFS(tracesDir(t)), BenchPolicies)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := WriteBenchTable(f, cells, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := WriteBenchTable(os.Stdout, cells, 0, 0); err != nil {
		t.Fatal(err)
	}
}
