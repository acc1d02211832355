package sim

import (
	"math"
	"os"
	"sort"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/perf"
)

// TestModelAdequacy fits the step-time model on every packed measurement of
// each type and reports its error over that type's candidates: an upper
// bound on what any probe set can reach with this model form. Run with
// SCAV_MODEL_ADEQUACY=1 -v.
func TestModelAdequacy(t *testing.T) {
	if os.Getenv("SCAV_MODEL_ADEQUACY") == "" {
		t.Skip("set SCAV_MODEL_ADEQUACY=1")
	}
	for _, app := range BenchApps {
		opts := Options{FS: os.DirFS(tracesDir(t)), App: app}
		w, err := load(&opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, typ := range w.types {
			var pts []perf.Point
			for key, rs := range w.rows {
				if key.typ != typ {
					continue
				}
				for _, r := range rs {
					pts = append(pts, perf.Point{Nodes: key.n, Replicas: key.k, LocalBatch: r.local, StepTime: r.step, SyncTime: math.Min(r.sync, r.step)})
				}
			}
			f, err := perf.Fit(pts)
			if err != nil {
				t.Fatal(err)
			}
			var errs []float64
			for _, c := range w.cands {
				if c.Type != typ {
					continue
				}
				st, _ := w.stepTime(c)
				errs = append(errs, 100*math.Abs(f.StepTime(c.Nodes, c.Workers, c.Local())-st)/st)
			}
			sort.Float64s(errs)
			t.Logf("%s %s: form %s, %d points, in-sample RMSLE %.3f, candidate step-time error median %.1f %%, p90 %.1f %%", app, typ, f.Form(), len(pts), f.RMSLE, Quantile(errs, .5), Quantile(errs, .9))
		}
	}
}
