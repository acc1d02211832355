package policy

import (
	"math"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/perf"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

func TestImprovement(t *testing.T) {
	lognormalEI := func(vstar, pt, s float64) float64 { // the textbook put
		d := math.Log(vstar/pt) / s
		return vstar*normCDF(d) - pt*math.Exp(s*s/2)*normCDF(d-s)
	}
	w := math.Exp(perf.Z90 * 0.3) // σ = 0.3 on both sides
	tests := []struct {
		name                string
		vstar, pt, lo, hi   float64
		wantEI, wantP, tolE float64
	}{
		{"certain and better", 10, 8, 8, 8, 2, 1, 1e-12},
		{"certain and worse", 10, 12, 12, 12, 0, 0, 1e-12},
		{"symmetric, worse median: the log-normal put", 10, 12, 12 / w, 12 * w, lognormalEI(10, 12, 0.3), normCDF(math.Log(10.0/12) / 0.3), 1e-9},
		{"symmetric, better median: the log-normal put", 10, 8, 8 / w, 8 * w, lognormalEI(10, 8, 0.3), normCDF(math.Log(10.0/8) / 0.3), 1e-9},
		// A long upper tail lowers the chance of winning, not the gain
		// below the median.
		{"lopsided", 10, 8, 8 / w, 80, -1, -1, 0},
	}
	for _, tc := range tests {
		ei, p := improvement(tc.vstar, tc.pt, tc.lo, tc.hi)
		if ei < 0 || ei > tc.vstar*p+1e-9 {
			t.Errorf("%s: EI %g with chance %g: not within [0, v*·P]", tc.name, ei, p)
		}
		if tc.wantEI >= 0 && (math.Abs(ei-tc.wantEI) > tc.tolE || math.Abs(p-tc.wantP) > 1e-9) {
			t.Errorf("%s: EI %g P %g, want %g %g", tc.name, ei, p, tc.wantEI, tc.wantP)
		}
	}
	sym, psym := improvement(10, 8, 8/w, 8*w)
	lop, plop := improvement(10, 8, 8/w, 80)
	if !(plop < psym) || !(lop < sym) {
		t.Errorf("long upper tail: EI %g P %g against symmetric %g %g", lop, plop, sym, psym)
	}
}

// TestProbeCost: probes are charged in the objective's units — seconds for
// time; dollars for cost with every node of the probe billed — and only
// for the chance that they lose.
func TestProbeCost(t *testing.T) {
	spec := synthSpec(objective.Time, 1e6)
	spec.ProbeSteps = 20
	inc := predict.Prediction{Candidate: predict.Candidate{Type: "slow", Nodes: 1, Workers: 4, Batch: 128}, StepTime: 1, Gain: 4}
	big := predict.Prediction{Candidate: predict.Candidate{Type: "fast", Nodes: 4, Workers: 16, Batch: 512}, StepTime: 1, Gain: 8}
	tr := newTracker(spec)
	if c := tr.probeCost(big, inc, 1); c != 0 {
		t.Errorf("a probe sure to win costs %g", c)
	}
	// Time: two relaunches of 30 s; its steps make more progress than the
	// incumbent's would: no loss.
	if c := tr.probeCost(big, inc, 0); math.Abs(c-60) > 1e-9 {
		t.Errorf("time: %g s, want 60", c)
	}
	spec.Objective.Kind = objective.Cost
	tr = newTracker(spec)
	// Cost: 30 s on 4 nodes at $10/h, 30 s back on 1 node at $2/h, and 20
	// steps of 1 s on 4 fast nodes ($0.2222) against the same progress (40
	// steps of 1 s) on one slow one ($0.0222).
	want := 30*4*10.0/3600 + 30*2.0/3600 + 20*4*10.0/3600 - 40*2.0/3600
	if c := tr.probeCost(big, inc, 0); math.Abs(c-want) > 1e-9 {
		t.Errorf("cost: $%g, want $%g", c, want)
	}
	if c := tr.probeCost(big, inc, 0.5); math.Abs(c-want/2) > 1e-9 {
		t.Errorf("cost at even odds: $%g, want $%g", c, want/2)
	}
	// A provider's minimum bill: the 4 fast machines the probe buys are
	// billed 120 s at least; the probe uses them 20 s of steps and 30 s of
	// relaunch, so 70 s more each are paid if it loses.
	spec.MinimumBillS = map[string]float64{"fast": 120, "slow": 120}
	tr = newTracker(spec)
	if c, w := tr.probeCost(big, inc, 0), want+4*70*10.0/3600; math.Abs(c-w) > 1e-9 {
		t.Errorf("cost with a 120 s minimum bill: $%g, want $%g", c, w)
	}
	// On the incumbent's type only the machines it does not hold are bought.
	more := predict.Prediction{Candidate: predict.Candidate{Type: "slow", Nodes: 3, Workers: 12, Batch: 384}, StepTime: 1, Gain: 8}
	if got, w := tr.minimumBill(more, inc, 50), 2*70*2.0/3600; math.Abs(got-w) > 1e-12 {
		t.Errorf("minimum bill of 2 more slow machines used 50 s: $%g, want $%g", got, w)
	}
	if got := tr.minimumBill(inc, more, 50); got != 0 {
		t.Errorf("a probe on fewer machines of the same type buys none, yet pays $%g", got)
	}
}

func growthTracker(target float64, ps ...float64) *tracker {
	tr := newTracker(Spec{Target: target, M0: 32})
	tr.grads = true
	for _, p := range ps {
		tr.growth = append(tr.growth, phiPoint{progress: p, lnPhi: math.Log(100 * math.Sqrt(p))})
	}
	return tr
}

func TestForecastMature(t *testing.T) {
	tests := []struct {
		name   string
		target float64
		ps     []float64
		want   bool
	}{
		{"two reports", 1e4, []float64{10, 100}, false},
		{"less than a quadrupling", 1e4, []float64{10, 20, 30}, false},
		{"seen 1 decade, 2 to go", 1e4, []float64{10, 50, 100}, false},
		{"seen as far as it extrapolates", 1e4, []float64{10, 50, 100, 320}, true},
		{"late in the job", 1e4, []float64{1000, 2000, 3000, 5000}, true},
		// Mature in span, but three reports cannot show an estimate reliable.
		{"late, too few reports", 1e4, []float64{1000, 2000, 5000}, false},
	}
	for _, tc := range tests {
		if got := growthTracker(tc.target, tc.ps...).forecastMature(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	tr := growthTracker(1e4)
	tr.grads = false
	if !tr.forecastMature() {
		t.Error("a throughput-only job waits on a forecast")
	}
}

// TestReliable: the warm-up gate passes on the scatter of the reports
// around their trend, not on the trend: a growing but smooth noise scale is
// reliable, a scattered one is not, and a flat one only after warmReports
// reports.
func TestReliable(t *testing.T) {
	mk := func(lnPhi ...float64) *tracker {
		tr := newTracker(Spec{M0: 32, Target: 1e6})
		for i, y := range lnPhi {
			tr.growth = append(tr.growth, phiPoint{progress: float64(10 * (i + 1)), lnPhi: y})
		}
		return tr
	}
	grow := func(n int) []float64 {
		var ys []float64
		for i := 0; i < n; i++ {
			ys = append(ys, 3+2*math.Log(float64(10*(i+1))))
		}
		return ys
	}
	tests := []struct {
		name string
		tr   *tracker
		want bool
	}{
		{"flat, too few reports", mk(3, 3, 3), false},
		{"flat", mk(3, 3, 3, 3), true},
		{"growing smoothly", mk(grow(5)...), true},
		{"scattered", mk(3, 3.4, 2.7, 3.3, 2.8, 3.2), false},
	}
	for _, tc := range tests {
		if got := tc.tr.reliable(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFitPaper(t *testing.T) {
	// γ/K = 0.5 + 8/√B and w = 1 + 2·γ/K through B = 64 and 256.
	g := func(b float64) float64 { return 0.5 + 8/math.Sqrt(b) }
	pts := []paperPoint{{256, g(256), 1 + 2*g(256)}, {64, g(64), 1 + 2*g(64)}}
	s, err := fitPaper(pts, 32)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(s.a-0.5) > 1e-9 || math.Abs(s.c-8) > 1e-9 || math.Abs(s.theta-2) > 1e-9 || math.Abs(s.estar-1) > 1e-9 {
		t.Fatalf("fit %+v", s)
	}
	tests := []struct {
		batch int
		want  float64
	}{
		{128, 1000 * (1 + 2*g(128)) * 32 / 128},
		{32, 1000}, // below M0: a step is worth its scale (w = 1)
		{4096, 1000 * (1 + 2*g(4096)) * 32 / 4096},
	}
	for _, tc := range tests {
		if got := s.Steps(1000, tc.batch); math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("B=%d: %g steps, want %g", tc.batch, got, tc.want)
		}
	}
	if _, err := fitPaper(pts[:1], 32); err == nil {
		t.Error("one probe fitted")
	}
}

// TestRelaunchMeasured: the relaunch cost measured on the job replaces the
// prior once there is one.
func TestRelaunchMeasured(t *testing.T) {
	spec := synthSpec(objective.Time, 1e6)
	tr := newTracker(spec)
	c := spec.Candidates[0]
	obs := Observation{Config: c, Steps: 20, StepTime: 0.1, Progress: 20}
	if err := tr.observe(obs); err != nil || tr.relaunchS() != 30 {
		t.Fatalf("prior: %g, %v", tr.relaunchS(), err)
	}
	obs.RelaunchS, obs.Progress = 4, 40
	if err := tr.observe(obs); err != nil || tr.relaunchS() != 4 {
		t.Fatalf("measured: %g, %v", tr.relaunchS(), err)
	}
}

// TestNextProbe: probing stops when no candidate's interval can beat the
// incumbent by more than the probe costs — every candidate measured, or a
// job too short for any relaunch to pay — and a type never measured is
// probed on a long job.
func TestNextProbe(t *testing.T) {
	observe := func(tr *tracker, c predict.Candidate, prog float64) {
		t.Helper()
		st := truth[c.Type].StepTime(c.Nodes, c.Workers, c.Local())
		o := Observation{Config: c, Steps: 20, StepTime: st, SyncTime: math.Min(truth[c.Type].Sync(c.Nodes, c.Workers), st),
			Grad: gns.Expected(1, 4, 32, c.Local(), c.Workers), Progress: prog}
		if err := tr.observe(o); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name      string
		target    float64
		all       bool
		wantProbe bool
		wantType  string
	}{
		{"long job: probe the other type", 1e6, false, true, "fast"},
		{"every candidate measured", 1e6, true, false, ""},
		{"shorter than a relaunch", 200, false, false, ""},
	}
	for _, tc := range tests {
		spec := synthSpec(objective.Time, tc.target)
		if err := spec.validate(); err != nil {
			t.Fatal(err)
		}
		tr := newTracker(spec)
		prog := 1.0
		for _, c := range spec.Candidates {
			if c.Type == "slow" || tc.all {
				observe(tr, c, prog)
				prog++
			}
		}
		observe(tr, spec.Candidates[0], prog)
		ms, err := tr.fit()
		if err != nil {
			t.Fatal(err)
		}
		preds, err := tr.predict(ms.models)
		if err != nil {
			t.Fatal(err)
		}
		o, ok := tr.nextProbe(preds)
		if ok != tc.wantProbe || (ok && o.c.Type != tc.wantType) {
			t.Errorf("%s: probe %v %+v, want %v of type %q", tc.name, ok, o, tc.wantProbe, tc.wantType)
		}
		if ms.kinds["fast"] != map[bool]string{true: "fit", false: "prior"}[tc.all] {
			t.Errorf("%s: fast predicted by %q", tc.name, ms.kinds["fast"])
		}
	}
}
