package policy

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/perf"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/optimizer/prior"
)

// Two synthetic machine types with known Pollux step times.
var truth = map[string]perf.Pollux{
	"slow": {AlphaC: 0.02, BetaC: 0.004, AlphaR: 0.01, BetaR: 0.002, AlphaN: 0.05, BetaN: 0.004, Gamma: 1.2},
	"fast": {AlphaC: 0.01, BetaC: 0.001, AlphaR: 0.005, BetaR: 0.001, AlphaN: 0.03, BetaN: 0.002, Gamma: 1.2},
}

func synthSpec(kind objective.Kind, target float64) Spec {
	var cands []predict.Candidate
	for _, typ := range []string{"slow", "fast"} {
		for _, nk := range [][2]int{{1, 1}, {1, 2}, {1, 4}, {2, 8}, {4, 16}} {
			for _, b := range []int{32, 64, 128, 256, 512} {
				if b >= nk[1]*8 && b <= nk[1]*128 {
					cands = append(cands, predict.Candidate{Type: typ, Nodes: nk[0], Workers: nk[1], Batch: b})
				}
			}
		}
	}
	return Spec{
		Candidates: cands,
		Prices:     map[string]float64{"slow": 2, "fast": 10},
		M0:         32,
		Target:     target,
		Objective:  objective.Objective{Kind: kind},
		RelaunchS:  30,
	}
}

// drive runs a policy against the synthetic truth with a constant noise
// scale (|G|² = 1, tr Σ = 4: φ = 128) until the target, and returns the
// configurations it ran and its last decision.
func drive(t *testing.T, p Policy, spec Spec) ([]predict.Candidate, Decision) {
	t.Helper()
	ran, ds := run(t, p, spec, noiseGain, func(float64) bool { return true })
	return ran, ds[len(ds)-1]
}

// noiseGain is the progress of one step at scale s under φ = 128.
func noiseGain(s float64) float64 {
	if s <= 1 {
		return s
	}
	return (4 + 1) / (4/s + 1)
}

// run drives a policy against the synthetic truth until the target: each
// step at scale s makes gain(s) progress, and the reports carry the
// gradient statistics of φ = 128 while grads(progress) holds. It returns
// the configurations run and every decision.
func run(t *testing.T, p Policy, spec Spec, gain func(float64) float64, grads func(float64) bool) ([]predict.Candidate, []Decision) {
	t.Helper()
	return runFrom(t, p, spec, spec.Candidates[0], gain, grads)
}

// runFrom is run from the configuration cur.
func runFrom(t *testing.T, p Policy, spec Spec, cur predict.Candidate, gain func(float64) float64, grads func(float64) bool) ([]predict.Candidate, []Decision) {
	t.Helper()
	return runStats(t, p, spec, cur, gain, func(prog float64, c predict.Candidate) (gns.Sample, bool) {
		return gns.Expected(1, 4, spec.M0, c.Local(), c.Workers), grads(prog)
	})
}

// runStats is runFrom whose reports carry the gradient statistics stats
// gives at the progress and configuration of each (none when it says so).
func runStats(t *testing.T, p Policy, spec Spec, cur predict.Candidate, gain func(float64) float64, stats func(float64, predict.Candidate) (gns.Sample, bool)) ([]predict.Candidate, []Decision) {
	t.Helper()
	ran := []predict.Candidate{cur}
	var now, spent, prog, wait float64
	var ds []Decision
	for i := 0; prog < spec.Target; i++ {
		if i > 100000 {
			t.Fatal("no progress")
		}
		st := truth[cur.Type].StepTime(cur.Nodes, cur.Workers, cur.Local())
		n := wait
		if n <= 0 {
			n = 30 / st
		}
		g := gain(float64(cur.Batch) / spec.M0)
		n = math.Min(n, (spec.Target-prog)/g)
		now += n * st
		spent += n * st * float64(cur.Nodes) * spec.Prices[cur.Type] / 3600
		prog += n * g
		if prog >= spec.Target*(1-1e-9) {
			break
		}
		o := Observation{
			ElapsedS: now, SpentUSD: spent, Config: cur, Steps: n, StepTime: st,
			SyncTime: math.Min(truth[cur.Type].Sync(cur.Nodes, cur.Workers), st), Progress: prog,
		}
		if g, ok := stats(prog, cur); ok {
			o.Grad = g
		}
		d, err := p.Observe(o)
		if err != nil {
			t.Fatalf("observe %d (%s): %v", i, cur, err)
		}
		ds = append(ds, d)
		wait = d.WaitSteps
		if d.Config != cur {
			cur = d.Config
			ran = append(ran, cur)
			now += spec.RelaunchS
		}
	}
	return ran, ds
}

// truthPrior is what an earlier job that measured every third candidate
// would have stored: the truth's step and sync times there, and the
// constant noise scale of φ = 128 along the job.
func truthPrior(spec Spec) *prior.Prior {
	p := &prior.Prior{Points: map[string][]prior.Point{}}
	for s := spec.M0; s <= spec.Target*spec.M0; s *= 10 {
		p.Noise = append(p.Noise, prior.NoisePoint{Samples: s, Phi: 128})
	}
	for i, c := range spec.Candidates {
		if i%3 != 0 {
			continue
		}
		m := truth[c.Type]
		st := m.StepTime(c.Nodes, c.Workers, c.Local())
		p.Points[c.Type] = append(p.Points[c.Type], prior.Point{Nodes: c.Nodes, Replicas: c.Workers, LocalBatch: c.Local(), StepS: st,
			SyncS: math.Min(m.Sync(c.Nodes, c.Workers), st), Steps: 20})
	}
	return p
}

// bestFor returns the candidate with the least remaining time or cost under
// the truth and φ = 128.
func bestFor(spec Spec) predict.Candidate {
	preds := truePredictions(spec)
	ch, err := objective.Choose(preds, spec.Objective)
	if err != nil {
		panic(err)
	}
	return preds[ch.Index].Candidate
}

// truePredictions predicts every candidate with the synthetic truth.
func truePredictions(spec Spec) []predict.Prediction {
	models := map[string]predict.StepTimer{}
	for k, v := range truth {
		models[k] = v
	}
	preds, err := predict.All(spec.Candidates, predict.Inputs{Models: models, Prices: spec.Prices, M0: spec.M0, Sqr: 1, Var: 4, Remaining: spec.Target})
	if err != nil {
		panic(err)
	}
	return preds
}

// nearBest reports whether c's true time (least time) or cost (least cost)
// is within tol of the optimum's.
func nearBest(spec Spec, c predict.Candidate, tol float64) bool {
	best := bestFor(spec)
	var got, want float64
	for _, p := range truePredictions(spec) {
		v := p.RemainingS
		if spec.Objective.Kind == objective.Cost {
			v = p.RemainingUSD
		}
		if p.Candidate == c {
			got = v
		}
		if p.Candidate == best {
			want = v
		}
	}
	return got > 0 && got <= want*(1+tol)
}

func TestPolicies(t *testing.T) {
	tests := []struct {
		name      string
		policy    string
		kind      objective.Kind
		target    float64
		stored    bool
		wantFinal bool // ends on the true optimum
		// nearFinal: ends within 2 % of the optimum's true time or cost
		// (the fitted model may rank a near-tie the other way).
		nearFinal bool
		wantType  string
		maxMoves  int
		minMoves  int
	}{
		{name: "fixed never moves", policy: "fixed", kind: objective.Time, target: 1e6, maxMoves: 0},
		// Partial search probes while a probe's expected improvement beats
		// its cost: the two types' identifiability designs (at most four
		// each) and a few candidates, then one move and a second look.
		{name: "scavenger time", policy: "scavenger", kind: objective.Time, target: 1e6, nearFinal: true, wantType: "fast", minMoves: 2, maxMoves: 12},
		{name: "scavenger cost", policy: "scavenger", kind: objective.Cost, target: 1e6, nearFinal: true, wantType: "slow", minMoves: 2, maxMoves: 12},
		// A job that would finish before one relaunch is over never moves.
		{name: "scavenger: short job does not search", policy: "scavenger", kind: objective.Time, target: 300, maxMoves: 0},
		{name: "full time", policy: "full", kind: objective.Time, target: 1e6, wantFinal: true, minMoves: 20, maxMoves: 100},
		{name: "none with stored truth", policy: "none", kind: objective.Time, target: 1e6, stored: true, wantFinal: true, minMoves: 1, maxMoves: 1},
		{name: "adaptive time", policy: "adaptive", kind: objective.Time, target: 1e6, nearFinal: true, wantType: "fast", minMoves: 1, maxMoves: 12},
		{name: "adaptive cost", policy: "adaptive", kind: objective.Cost, target: 1e6, nearFinal: true, wantType: "slow", minMoves: 1, maxMoves: 12},
		{name: "adaptive: short job does not search", policy: "adaptive", kind: objective.Time, target: 300, maxMoves: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := synthSpec(tc.kind, tc.target)
			if tc.stored {
				spec.Prior = truthPrior(spec)
			}
			p, err := New(tc.policy, spec)
			if err != nil {
				t.Fatal(err)
			}
			if p.Name() != tc.policy {
				t.Fatalf("name %s", p.Name())
			}
			ran, last := drive(t, p, spec)
			moves := len(ran) - 1
			if moves < tc.minMoves || moves > tc.maxMoves {
				t.Errorf("%d moves (%v), want %d..%d; last: %s", moves, ran, tc.minMoves, tc.maxMoves, last.Reason)
			}
			if tc.wantFinal {
				if want := bestFor(spec); ran[len(ran)-1] != want {
					t.Errorf("ended on %s, want %s (%s; ran %v)", ran[len(ran)-1], want, last.Reason, ran)
				}
			}
			if tc.nearFinal && !nearBest(spec, ran[len(ran)-1], 0.03) {
				t.Errorf("ended on %s, not within 3%% of %s (%s; ran %v)", ran[len(ran)-1], bestFor(spec), last.Reason, ran)
			}
			if tc.wantType != "" && ran[len(ran)-1].Type != tc.wantType {
				t.Errorf("ended on %s, want type %s", ran[len(ran)-1], tc.wantType)
			}
			if last.Reason == "" {
				t.Error("decision without a reason")
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	spec := synthSpec(objective.Time, 1e6)
	if _, err := New("greedy", spec); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("unknown: %v", err)
	}
	if _, err := New("none", spec); !errors.Is(err, ErrNoStoredModel) {
		t.Errorf("none: %v", err)
	}
	bad := spec
	bad.M0 = 0
	if _, err := New("fixed", bad); !errors.Is(err, ErrBadSpec) {
		t.Errorf("M0: %v", err)
	}
	bad = spec
	bad.Prices = map[string]float64{"slow": 1}
	if _, err := New("fixed", bad); !errors.Is(err, ErrBadSpec) {
		t.Errorf("prices: %v", err)
	}
	p, _ := New("fixed", spec)
	if _, err := p.Observe(Observation{Config: spec.Candidates[0], Steps: 0, StepTime: 1}); !errors.Is(err, ErrBadObservation) {
		t.Errorf("observation: %v", err)
	}
	if _, err := p.Observe(Observation{Config: spec.Candidates[0], Steps: 1, StepTime: 1, Grad: gns.Sample{Count: 1, Scale: 1}}); !errors.Is(err, gns.ErrTooFew) {
		t.Errorf("gradient: %v", err)
	}
}

func TestSettled(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		n    int
		want bool
	}{
		{"too few", []float64{100, 100}, 3, false},
		{"flat", []float64{50, 100, 101, 99, 100}, 4, true},
		{"drifting", []float64{110, 106, 103, 100}, 4, false},
		{"old outlier ignored", []float64{200, 100, 100, 100}, 3, true},
	}
	for _, tc := range tests {
		if got := settled(tc.xs, tc.n, 0.02); got != tc.want {
			t.Errorf("%s: settled(%v) = %v, want %v", tc.name, tc.xs, got, tc.want)
		}
	}
}

func TestDesignProbes(t *testing.T) {
	c := func(n, k, b int) predict.Candidate {
		return predict.Candidate{Type: "x", Nodes: n, Workers: k, Batch: b}
	}
	tests := []struct {
		name  string
		cands []predict.Candidate
		want  []predict.Candidate
	}{
		// One replica at the smallest batch, a full node (4) at both ends,
		// the largest placement at the largest batch.
		{"full node and extremes", []predict.Candidate{c(1, 1, 8), c(1, 1, 32), c(1, 2, 16), c(1, 4, 16), c(1, 4, 128), c(2, 8, 64), c(2, 8, 256)},
			[]predict.Candidate{c(1, 1, 8), c(1, 4, 16), c(1, 4, 128), c(2, 8, 256)}},
		// A type whose largest placement is one node: three probes.
		{"one node only", []predict.Candidate{c(1, 1, 8), c(1, 2, 16), c(1, 2, 32), c(1, 4, 32), c(1, 4, 64)},
			[]predict.Candidate{c(1, 1, 8), c(1, 4, 32), c(1, 4, 64)}},
		// One batch per placement: the full node's two ends coincide.
		{"one batch each", []predict.Candidate{c(1, 1, 8), c(1, 4, 32), c(4, 16, 256)},
			[]predict.Candidate{c(1, 1, 8), c(1, 4, 32), c(4, 16, 256)}},
	}
	for _, tc := range tests {
		got := designProbes(tc.cands, "x")
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %v, want %v", tc.name, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: probe %d = %s, want %s", tc.name, i, got[i], tc.want[i])
			}
		}
	}
}

func TestAdaptiveCommitsSettledPlan(t *testing.T) {
	spec := synthSpec(objective.Time, 1e6)
	p, err := New("adaptive", spec)
	if err != nil {
		t.Fatal(err)
	}
	drive(t, p, spec)
	if !p.(*adaptive).committed {
		t.Error("adaptive never committed its plan under a constant noise scale")
	}
}

// TestPhases: every decision carries its phase, typed, and each searching
// policy goes warm-up, then probing (every move to a probe and every wait on
// one), then optimised, and never back.
func TestPhases(t *testing.T) {
	order := map[Phase]int{PhaseWarmup: 0, PhaseProbing: 1, PhaseOptimised: 2}
	for _, c := range []struct {
		name string
		want []Phase // the phases it must pass through
	}{
		// scavenger and adaptive probe before the noise estimate is
		// reliable (probes measure step times): warm-up is skipped when a
		// probe pays at the first report.
		{"scavenger", []Phase{PhaseProbing, PhaseOptimised}},
		{"full", []Phase{PhaseWarmup, PhaseProbing, PhaseOptimised}},
		// adaptive measures each configuration it moves to (probing again).
		{"adaptive", []Phase{PhaseProbing, PhaseOptimised}},
		{"fixed", []Phase{PhaseOptimised}},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := synthSpec(objective.Time, 2e6)
			p, err := New(c.name, spec)
			if err != nil {
				t.Fatal(err)
			}
			_, ds := run(t, p, spec, noiseGain, func(float64) bool { return true })
			seen := map[Phase]bool{}
			last := PhaseWarmup
			for i, d := range ds {
				if _, ok := order[d.Phase]; !ok {
					t.Fatalf("decision %d (%s): phase %q", i, d.Reason, d.Phase)
				}
				if order[d.Phase] < order[last] && c.name != "adaptive" {
					t.Errorf("decision %d (%s): back from %s to %s", i, d.Reason, last, d.Phase)
				}
				if d.Chosen >= 0 && d.Phase != PhaseOptimised {
					t.Errorf("decision %d (%s) chose among predictions in phase %s", i, d.Reason, d.Phase)
				}
				seen[d.Phase], last = true, d.Phase
			}
			for _, ph := range c.want {
				if !seen[ph] {
					t.Errorf("never in phase %s over %d decisions", ph, len(ds))
				}
			}
		})
	}
}

// TestAdaptiveBacksOffReversals: gradient statistics whose noise scale
// swings between two regimes (the small batches best, then the large)
// faster than the job can follow make adaptive move back and forth; each
// move back to a configuration a move left doubles the time it must stay
// before the next move, so that the swings cost a few relaunches, not one
// every dwell (without the back-off: 207 moves, 203 of them back, in this
// job of about 90,000 s; the dwell grows to 2^maxReversals × 300 s, so a
// dozen at most).
func TestAdaptiveBacksOffReversals(t *testing.T) {
	spec := synthSpec(objective.Time, 4e6)
	p, err := New("adaptive", spec)
	if err != nil {
		t.Fatal(err)
	}
	// tr Σ of 0.5 (φ = 16) and 64 (φ = 2048), swapped every 0.5 % of the work.
	swing := func(prog float64, c predict.Candidate) (gns.Sample, bool) {
		vari := 0.5
		if int(200*prog/spec.Target)%2 == 1 {
			vari = 64
		}
		return gns.Expected(1, vari, spec.M0, c.Local(), c.Workers), true
	}
	_, ds := runStats(t, p, spec, spec.Candidates[0], noiseGain, swing)
	var moves, back int
	left := map[predict.Candidate]bool{}
	cur := spec.Candidates[0]
	for _, d := range ds {
		if d.Config == cur || !strings.HasPrefix(d.Reason, "move:") {
			cur = d.Config
			continue
		}
		moves++
		if left[d.Config] {
			back++
		}
		left[cur], cur = true, d.Config
	}
	t.Logf("%d moves, %d back to a configuration a move left, %d decisions", moves, back, len(ds))
	if back > 12 {
		t.Errorf("%d moves back to a configuration a move left (of %d moves): the dwell did not back off", back, moves)
	}
}

// TestAdaptiveLeavesAProbeAtOnce: a move must dwell before the next one, a
// probe need not: after a move and then a probe, the job leaves the probed
// configuration at the next report when something beats it by the margin.
func TestAdaptiveLeavesAProbeAtOnce(t *testing.T) {
	spec := synthSpec(objective.Time, 1e6)
	pol, err := New("adaptive", spec)
	if err != nil {
		t.Fatal(err)
	}
	p := pol.(*adaptive)
	here, there := spec.Candidates[0], spec.Candidates[1]
	preds := []predict.Prediction{{Candidate: here, StepTime: 1, TotalS: 1000}, {Candidate: there, StepTime: 0.1, TotalS: 100}}
	o := Observation{Config: here, ElapsedS: 10}
	d := Decision{Config: there, Chosen: 1, Predictions: preds}
	p.moved, p.arrived = true, 9 // a move 1 s ago
	if got := p.move(o, d); got.Config == there {
		t.Fatalf("1 s after a move: %s (%s), want a stay (the dwell)", got.Config, got.Reason)
	}
	p.probing(Decision{Config: here})
	if got := p.move(o, d); got.Config != there {
		t.Errorf("1 s after a probe: %s (%s), want the move to %s", got.Config, got.Reason, there)
	}
}
