package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

var update = flag.Bool("update", false, "rewrite golden files")

// tiny is a synthetic application on one type "aws" (4 GPUs per node).
func tiny() fstest.MapFS {
	return fstest.MapFS{
		"tiny/placements-aws.csv": {Data: []byte("placement,local_bsz,step_time,sync_time\n" +
			"1,8,1.0,0.0\n1,16,2.0,0.0\n" +
			"4,8,1.5,0.5\n4,16,2.5,0.5\n" +
			"22,8,9,1\n" + // not packed: ignored
			"44,8,3.0,2.0\n44,16,4.0,2.0\n")},
		"tiny/scalability-aws.csv": {Data: []byte("num_nodes,num_replicas,local_bsz,step_time,sync_time\n" +
			"2,8,8,100,1\n" + // (2,8) comes from placements: ignored
			"4,16,8,5.0,3.0\n4,16,16,6.0,3.0\n")},
		"tiny/validation-8.csv":  {Data: []byte("progress,iteration,metric,grad_sqr,grad_var\n100,100,0.5,1,1\n200,200,0.6,1,1\n")},
		"tiny/validation-32.csv": {Data: []byte("progress,iteration,metric,grad_sqr,grad_var\n90,30,0.5,1,1\n300,100,0.6,1,1\n")},
	}
}

func TestWorldSemantics(t *testing.T) {
	opts := Options{FS: tiny(), App: "tiny", Types: []string{"aws"}}
	w, err := load(&opts)
	if err != nil {
		t.Fatal(err)
	}
	if w.target != 200 || w.m0 != 8 || w.gpus["aws"] != 4 {
		t.Fatalf("target %g m0 %g gpus %d", w.target, w.m0, w.gpus["aws"])
	}
	got := map[string]bool{}
	for _, c := range w.cands {
		got[c.String()] = true
	}
	for _, want := range []string{"aws:1:1:8", "aws:1:4:32"} {
		if !got[want] {
			t.Errorf("missing candidate %s in %v", want, w.cands)
		}
	}
	for _, not := range []string{"aws:1:1:32", "aws:2:8:32", "aws:4:16:32", "aws:2:4:8"} {
		if got[not] {
			t.Errorf("unexpected candidate %s", not)
		}
	}
	tests := []struct {
		c          predict.Candidate
		step, sync float64
	}{
		{predict.Candidate{Type: "aws", Nodes: 1, Workers: 4, Batch: 48}, 2.0, 0.5}, // local 12: halfway
		{predict.Candidate{Type: "aws", Nodes: 1, Workers: 1, Batch: 8}, 1.0, 0.0},
		{predict.Candidate{Type: "aws", Nodes: 4, Workers: 16, Batch: 192}, 5.5, 3.0}, // scalability rows
		{predict.Candidate{Type: "aws", Nodes: 2, Workers: 8, Batch: 64}, 3.0, 2.0},   // placement rows win
	}
	for _, tc := range tests {
		s, y := w.stepTime(tc.c)
		if math.Abs(s-tc.step) > 1e-12 || math.Abs(y-tc.sync) > 1e-12 {
			t.Errorf("%s: step %g sync %g, want %g %g", tc.c, s, y, tc.step, tc.sync)
		}
	}
	// Progress: B=32 gains 3 per step for 30 steps, then 3 per step (210/70).
	steps, secs, gained := w.run(predict.Candidate{Type: "aws", Nodes: 1, Workers: 4, Batch: 32}, 0, math.Inf(1))
	if math.Abs(gained-200) > 1e-9 || math.Abs(steps-(30+110.0/3)) > 1e-9 || math.Abs(secs-steps*1.5) > 1e-9 {
		t.Errorf("run: steps %g secs %g gained %g", steps, secs, gained)
	}
	jct, cost := w.fixedOutcome(predict.Candidate{Type: "aws", Nodes: 1, Workers: 1, Batch: 8})
	if jct != 200 || math.Abs(cost-200*3.912/3600) > 1e-12 {
		t.Errorf("fixed: %g s $%g", jct, cost)
	}
}

func TestRunFixedMatchesOracleArithmetic(t *testing.T) {
	rep, err := Run(context.Background(), Options{FS: tiny(), App: "tiny", Types: []string{"aws"}, Policy: "fixed", Start: "aws:1:8"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Relaunches != 0 || len(rep.History) != 1 || math.Abs(rep.JCTS-200) > 1e-9 {
		t.Fatalf("fixed run: %+v", rep)
	}
	if rep.PredictedJCTS != 0 || rep.StepTimeError.N != 0 {
		t.Fatalf("fixed policy predicted something: %+v", rep)
	}
	if rep.Fixed.Count != rep.Candidates || rep.Oracle.JCTS > rep.JCTS {
		t.Fatalf("scores: %+v", rep)
	}
}

func TestRunRelaunchIsBilled(t *testing.T) {
	rep, err := Run(context.Background(), Options{FS: tiny(), App: "tiny", Types: []string{"aws"}, Policy: "full", RelaunchPenalty: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Relaunches < 1 || len(rep.History) != rep.Relaunches+1 {
		t.Fatalf("relaunches %d history %d", rep.Relaunches, len(rep.History))
	}
	// Recompute time and cost from the history: steps × step time + penalties.
	opts := Options{FS: tiny(), App: "tiny", Types: []string{"aws"}}
	w, _ := load(&opts)
	var secs, usd float64
	for i, h := range rep.History {
		c := predict.Candidate{Type: h.Type, Nodes: h.Nodes, Workers: h.Workers, Batch: h.Batch}
		st, _ := w.stepTime(c)
		run := h.Steps * st
		if i > 0 {
			run += 10
		}
		secs += run
		usd += run * float64(c.Nodes) * 3.912 / 3600
	}
	if math.Abs(secs-rep.JCTS) > 1e-6 || math.Abs(usd-rep.CostUSD) > 1e-9 {
		t.Fatalf("history gives %g s $%g, report %g s $%g", secs, usd, rep.JCTS, rep.CostUSD)
	}
}

func TestRunErrors(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want error
	}{
		{"bad start", Options{FS: tiny(), App: "tiny", Types: []string{"aws"}, Start: "aws:3:8"}, ErrBadStart},
		{"malformed start", Options{FS: tiny(), App: "tiny", Types: []string{"aws"}, Start: "aws-3"}, ErrBadStart},
		{"no trace dir", Options{}, ErrBadOptions},
		{"negative penalty", Options{FS: tiny(), App: "tiny", Types: []string{"aws"}, RelaunchPenalty: -time.Second}, ErrBadOptions},
	}
	for _, tc := range tests {
		if _, err := Run(context.Background(), tc.opts); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := Run(context.Background(), Options{FS: tiny(), App: "tiny", Types: []string{"quad"}}); err == nil {
		t.Error("unpriced type accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Options{FS: tiny(), App: "tiny", Types: []string{"aws"}}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// TestGoldenJSON is the golden test of `scavctl sim -o json` on one
// application of shared/traces. Regenerate with -update.
func TestGoldenJSON(t *testing.T) {
	dir := tracesDir(t)
	for _, pol := range []string{"scavenger", "adaptive"} {
		t.Run(pol, func(t *testing.T) {
			rep, err := Run(context.Background(), Options{TraceDir: filepath.Join(dir, "cifar10"), Objective: objective.Objective{Kind: objective.Cost}, Policy: pol})
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(rep, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", "cifar10-cost-"+pol+".json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("report differs from %s (run with -update to accept):\n%s", golden, got)
			}
			var m map[string]any
			if err := json.Unmarshal(got, &m); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"jct_s", "cost_usd", "relaunches", "history", "predicted_jct_s", "predicted_cost_usd", "oracle", "fixed", "step_time_error"} {
				if _, ok := m[k]; !ok {
					t.Errorf("JSON lacks %q", k)
				}
			}
		})
	}
}

func TestNonePolicyReusesPriorModels(t *testing.T) {
	dir := tracesDir(t)
	rep, err := Run(context.Background(), Options{TraceDir: filepath.Join(dir, "deepspeech2"), Objective: objective.Objective{Kind: objective.Time}, Policy: "none"})
	if err != nil {
		t.Fatal(err)
	}
	// One decision, and at most one more move at its second look; the
	// decision may be where the job starts (Policy.Start), no relaunch.
	moves := rep.Relaunches
	if rep.StartedAt != nil {
		moves++
	}
	if moves < 1 || moves > 2 || rep.PredictedJCTS == 0 || rep.Probes != 0 {
		t.Fatalf("none: %d moves (%d probes, started at %+v), predicted %g (%s)", moves, rep.Probes, rep.StartedAt, rep.PredictedJCTS, rep.Reason)
	}
}

func TestPlan(t *testing.T) {
	rows, err := Plan(context.Background(), Options{FS: tiny(), App: "tiny", Types: []string{"aws"}, Objective: objective.Objective{Kind: objective.Cost}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("no rows")
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].CostUSD < rows[i-1].CostUSD {
			t.Fatalf("not sorted by cost: %+v", rows)
		}
	}
	var b bytes.Buffer
	if err := WritePlan(&b, rows); err != nil || !bytes.Contains(b.Bytes(), []byte("aws")) {
		t.Fatalf("table %q, %v", b.String(), err)
	}
}

func TestGradInterpolation(t *testing.T) {
	opts := Options{FS: tiny(), App: "tiny", Types: []string{"aws"}}
	w, err := load(&opts)
	if err != nil {
		t.Fatal(err)
	}
	w.vals[8].Rows[1].GradSqr = 4 // midpoints 50 (sqr 1) and 150 (sqr 4)
	// Before the first midpoint the trend goes on back to the first step
	// (×2 per 50 of progress): no flat plateau.
	tests := []struct{ p, want float64 }{{0, 0.5}, {25, 1 / math.Sqrt2}, {50, 1}, {100, 2}, {150, 4}, {190, 4}}
	for _, tc := range tests {
		if got, _ := w.grad(8, tc.p); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("p=%g: sqr %g, want %g", tc.p, got, tc.want)
		}
	}
}

func TestOracleRespectsDeadlineAndBudget(t *testing.T) {
	base := Options{FS: tiny(), App: "tiny", Types: []string{"aws"}, Policy: "fixed"}
	free, err := Run(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		o    objective.Objective
		ok   func(r *Report) bool
	}{
		{"least cost within a deadline", objective.Objective{Kind: objective.Cost, DeadlineS: free.Oracle.JCTS * 1.01},
			func(r *Report) bool { return r.Oracle.JCTS <= free.Oracle.JCTS*1.01 }},
		{"least time within a budget", objective.Objective{Kind: objective.Time, BudgetUSD: 0.3},
			func(r *Report) bool { return r.Oracle.CostUSD <= 0.3 }},
		{"knee", objective.Objective{Kind: objective.Knee}, func(r *Report) bool { return r.Oracle.JCTS > 0 }},
	}
	for _, tc := range tests {
		opts := base
		opts.Objective = tc.o
		r, err := Run(context.Background(), opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !tc.ok(r) {
			t.Errorf("%s: oracle %+v", tc.name, r.Oracle)
		}
	}
}

func TestNoiseIsSeeded(t *testing.T) {
	run := func(seed uint64) *Report {
		r, err := Run(context.Background(), Options{FS: tiny(), App: "tiny", Types: []string{"aws"}, Policy: "adaptive", Noise: 0.2, Seed: seed, RelaunchPenalty: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := run(1), run(1)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatal("same seed, different reports")
	}
}
