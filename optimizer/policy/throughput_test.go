package policy

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// driveThroughput runs a policy against the synthetic step-time truth as an
// uninstrumented job: no gradient statistics (the zero gns.Sample) and
// progress counted in samples over M0. From gradsAt progress on (0: never)
// the reports carry the statistics of φ = 128. It returns the
// configurations run and every decision.
func driveThroughput(t *testing.T, p Policy, spec Spec, gradsAt float64) ([]predict.Candidate, []Decision) {
	t.Helper()
	every := func(s float64) float64 { return s }
	return run(t, p, spec, every, func(prog float64) bool { return gradsAt > 0 && prog >= gradsAt })
}

// throughputPredictions predicts every candidate with the synthetic truth
// and every sample fully useful (gain = batch/M0).
func throughputPredictions(spec Spec) []predict.Prediction {
	models := map[string]predict.StepTimer{}
	for k, v := range truth {
		models[k] = v
	}
	preds, err := predict.All(spec.Candidates, predict.Inputs{Models: models, Prices: spec.Prices, M0: spec.M0, Sqr: 0, Var: 1, Remaining: spec.Target})
	if err != nil {
		panic(err)
	}
	return preds
}

// nearBestThroughput reports whether c's true time (least time) or cost
// (least cost) at full efficiency is within tol of the optimum's, and
// returns the optimum.
func nearBestThroughput(spec Spec, c predict.Candidate, tol float64) (bool, predict.Candidate) {
	preds := throughputPredictions(spec)
	ch, err := objective.Choose(preds, spec.Objective)
	if err != nil {
		panic(err)
	}
	best := preds[ch.Index]
	val := func(p predict.Prediction) float64 {
		if spec.Objective.Kind == objective.Cost {
			return p.RemainingUSD
		}
		return p.RemainingS
	}
	for _, p := range preds {
		if p.Candidate == c {
			return val(p) <= val(best)*(1+tol), best.Candidate
		}
	}
	return false, best.Candidate
}

func TestThroughputOnly(t *testing.T) {
	// The mode matters: with every sample fully useful the optimum is a
	// larger batch than under φ = 128.
	for _, k := range []objective.Kind{objective.Time, objective.Cost} {
		spec := synthSpec(k, 1e6)
		if _, best := nearBestThroughput(spec, spec.Candidates[0], 0); best == bestFor(spec) || best.Batch <= bestFor(spec).Batch {
			t.Fatalf("%s: throughput optimum %s, noise-aware %s: the test cannot tell them apart", k, best, bestFor(spec))
		}
	}
	tests := []struct {
		name     string
		policy   string
		kind     objective.Kind
		target   float64
		stored   bool
		best     bool // ends on the optimum under full efficiency
		near     float64
		wantType string
		minMoves int
		maxMoves int
	}{
		{name: "fixed never moves", policy: "fixed", kind: objective.Time, target: 1e6},
		{name: "full time", policy: "full", kind: objective.Time, target: 1e6, best: true, minMoves: 20, maxMoves: 100},
		{name: "full cost", policy: "full", kind: objective.Cost, target: 1e6, best: true, minMoves: 20, maxMoves: 100},
		{name: "none with stored truth", policy: "none", kind: objective.Time, target: 1e6, stored: true, best: true, minMoves: 1, maxMoves: 1},
		{name: "scavenger time", policy: "scavenger", kind: objective.Time, target: 1e6, near: 0.03, wantType: "fast", minMoves: 2, maxMoves: 12},
		{name: "scavenger cost", policy: "scavenger", kind: objective.Cost, target: 1e6, near: 0.03, wantType: "slow", minMoves: 2, maxMoves: 12},
		{name: "scavenger: short job does not search", policy: "scavenger", kind: objective.Time, target: 300},
		{name: "adaptive time", policy: "adaptive", kind: objective.Time, target: 1e6, near: 0.03, wantType: "fast", minMoves: 1, maxMoves: 12},
		{name: "adaptive cost", policy: "adaptive", kind: objective.Cost, target: 1e6, near: 0.03, wantType: "slow", minMoves: 1, maxMoves: 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := synthSpec(tc.kind, tc.target)
			if tc.stored {
				spec.Prior = truthPrior(spec)
				spec.Prior.Noise = nil // an earlier throughput-only job measured no noise
			}
			p, err := New(tc.policy, spec)
			if err != nil {
				t.Fatal(err)
			}
			ran, ds := driveThroughput(t, p, spec, 0)
			if len(ds) == 0 {
				t.Fatal("no decisions")
			}
			last := ds[len(ds)-1]
			if moves := len(ran) - 1; moves < tc.minMoves || moves > tc.maxMoves {
				t.Errorf("%d moves (%v), want %d..%d; last: %s", moves, ran, tc.minMoves, tc.maxMoves, last.Reason)
			}
			for i, d := range ds {
				if !strings.HasPrefix(d.Reason, ThroughputOnlyReason) {
					t.Errorf("decision %d reason %q lacks the throughput-only prefix", i, d.Reason)
				}
				if strings.Contains(d.Reason, "noise") {
					t.Errorf("decision %d waits on the noise: %q", i, d.Reason)
				}
				for _, pr := range d.Predictions {
					if s := float64(pr.Batch) / spec.M0; math.Abs(pr.Gain-s) > 1e-12*s {
						t.Errorf("decision %d: %s gain %g, want the scale %g", i, pr.Candidate, pr.Gain, s)
					}
				}
			}
			final := ran[len(ran)-1]
			ok, best := nearBestThroughput(spec, final, tc.near)
			if (tc.best || tc.near > 0) && !ok {
				t.Errorf("ended on %s, want within %g%% of %s (%s; ran %v)", final, 100*tc.near, best, last.Reason, ran)
			}
			if tc.best && final != best {
				t.Errorf("ended on %s, want %s", final, best)
			}
			if tc.wantType != "" && final.Type != tc.wantType {
				t.Errorf("ended on %s, want type %s", final, tc.wantType)
			}
		})
	}
}

// TestThroughputOnlyProbesAtOnce: without gradient statistics the searching
// policies leave the warm-up at the first report instead of waiting for the
// noise (up to warmMaxSteps steps).
func TestThroughputOnlyProbesAtOnce(t *testing.T) {
	for _, name := range []string{"full", "scavenger", "adaptive"} {
		t.Run(name, func(t *testing.T) {
			spec := synthSpec(objective.Time, 1e6)
			p, err := New(name, spec)
			if err != nil {
				t.Fatal(err)
			}
			// Start on a probe-less configuration so that the first
			// decision must move.
			cur := predict.Candidate{Type: "slow", Nodes: 1, Workers: 2, Batch: 64}
			st := truth[cur.Type].StepTime(cur.Nodes, cur.Workers, cur.Local())
			d, err := p.Observe(Observation{ElapsedS: 20 * st, Config: cur, Steps: 20, StepTime: st, Progress: 40})
			if err != nil {
				t.Fatal(err)
			}
			if d.Config == cur {
				t.Errorf("first decision stays: %s", d.Reason)
			}
		})
	}
}

// TestThroughputOnlyEndsWithGradients: once reports carry gradient
// statistics the job is no longer throughput-only.
func TestThroughputOnlyEndsWithGradients(t *testing.T) {
	spec := synthSpec(objective.Time, 1e6)
	p, err := New("adaptive", spec)
	if err != nil {
		t.Fatal(err)
	}
	_, ds := driveThroughput(t, p, spec, 2e5)
	first, last := ds[0], ds[len(ds)-1]
	if !strings.HasPrefix(first.Reason, ThroughputOnlyReason) {
		t.Errorf("first reason %q lacks the prefix", first.Reason)
	}
	if strings.HasPrefix(last.Reason, ThroughputOnlyReason) {
		t.Errorf("last reason %q still throughput-only", last.Reason)
	}
}

// TestObserveGradientSamples: the zero sample is no statistics; a
// non-zero sample is still validated.
func TestObserveGradientSamples(t *testing.T) {
	spec := synthSpec(objective.Time, 1e6)
	c := spec.Candidates[0]
	tests := []struct {
		name    string
		grad    gns.Sample
		wantErr error
		only    bool
	}{
		{name: "zero sample", grad: gns.Sample{}, only: true},
		{name: "count 0, other fields set", grad: gns.Sample{Scale: 1}, only: true},
		{name: "valid sample", grad: gns.Expected(1, 4, spec.M0, c.Local(), 2)},
		{name: "single gradient", grad: gns.Sample{Count: 1, Scale: 1}, wantErr: gns.ErrTooFew},
		{name: "negative count", grad: gns.Sample{Count: -1, Scale: 1}, wantErr: gns.ErrBadSample},
		{name: "NaN count", grad: gns.Sample{Count: math.NaN(), Scale: 1}, wantErr: gns.ErrBadSample},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New("fixed", spec)
			if err != nil {
				t.Fatal(err)
			}
			d, err := p.Observe(Observation{Config: c, Steps: 10, StepTime: 0.1, Grad: tc.grad, Progress: 10})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.HasPrefix(d.Reason, ThroughputOnlyReason); got != tc.only {
				t.Errorf("reason %q: throughput-only %v, want %v", d.Reason, got, tc.only)
			}
		})
	}
}
