package sim

import (
	"context"
	"errors"
	"math"
	"os"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
)

// recorder keeps the observations a policy saw and the index of the first
// decision that left the warm-up.
type recorder struct {
	policy.Policy
	obs    []policy.Observation
	passed int
}

func (r *recorder) Observe(o policy.Observation) (policy.Decision, error) {
	d, err := r.Policy.Observe(o)
	r.obs = append(r.obs, o)
	if r.passed < 0 && d.Phase != policy.PhaseWarmup {
		r.passed = len(r.obs) - 1
		return d, errPassed // only the warm-up matters: stop the run
	}
	return d, err
}

var errPassed = errors.New("warm-up passed")

// phiOf is the noise scale of one report's gradient statistics.
func phiOf(t *testing.T, o policy.Observation, m0 float64) float64 {
	t.Helper()
	sqr, vari, err := gns.Unbiased(o.Grad)
	if err != nil {
		t.Fatal(err)
	}
	return m0 * vari / sqr
}

// TestWarmupGateNotOnFlatStatistics: the simulator used to hold every
// trace's gradient statistics flat until the first validation row's
// midpoint (a quarter of bert's job), so the warm-up gate passed on a noise
// scale that no real job shows. Now the statistics move from the first
// step: on every application the reports behind the gate's passing differ,
// and it passes on what the job really shows (full search, whose warm-up
// is a pure gate).
func TestWarmupGateNotOnFlatStatistics(t *testing.T) {
	traces := os.DirFS(tracesDir(t))
	for _, app := range BenchApps {
		opts := Options{FS: traces, App: app, Objective: objective.Objective{Kind: objective.Time}, Policy: "full"}
		w, err := load(&opts)
		if err != nil {
			t.Fatal(err)
		}
		start, err := w.start("")
		if err != nil {
			t.Fatal(err)
		}
		mids := w.vals[start.Batch].Rows[0].Progress / 2
		spec := policy.Spec{Candidates: w.cands, Prices: w.prices, M0: w.m0, Target: w.target, Objective: opts.Objective, RelaunchS: 30}
		pol, err := policy.New("full", spec)
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{Policy: pol, passed: -1}
		if _, err := w.simulate(context.Background(), rec, start, opts); !errors.Is(err, errPassed) {
			t.Fatalf("%s: the gate never passed (%d reports): %v", app, len(rec.obs), err)
		}
		if rec.passed == 0 {
			// The first report already ran warmMaxSteps steps (ncf's
			// tiny steps): the gate passes on the step cap, not on φ.
			t.Logf("%s: gate passed at the first report, %.0f steps", app, rec.obs[0].Steps)
			continue
		}
		seen := rec.obs[:rec.passed+1]
		for i := 1; i < len(seen); i++ {
			a, b := phiOf(t, seen[i-1], w.m0), phiOf(t, seen[i], w.m0)
			if seen[i].Progress < mids && math.Abs(b-a) <= 1e-9*math.Abs(a) {
				t.Errorf("%s: reports %d and %d before the first midpoint (progress %.0f < %.0f) show the same noise scale %g", app, i-1, i, seen[i].Progress, mids, a)
			}
		}
		t.Logf("%s: gate passed after %d reports at progress %.0f (first midpoint %.0f), φ %.4g → %.4g", app, rec.passed+1, seen[len(seen)-1].Progress,
			mids, phiOf(t, seen[0], w.m0), phiOf(t, seen[len(seen)-1], w.m0))
	}
}
