package policy

import (
	"math"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/optimizer/prior"
)

// TestSecondRun: what a first scavenger job learnt, stored and read back
// (prior.Entries, prior.For), lets a second job of the same signature start
// where its models say (Start) and probe at most once, ending near the
// optimum.
func TestSecondRun(t *testing.T) {
	for _, kind := range []objective.Kind{objective.Time, objective.Cost} {
		t.Run(string(kind), func(t *testing.T) {
			spec := synthSpec(kind, 1e6)
			first, err := New("scavenger", spec)
			if err != nil {
				t.Fatal(err)
			}
			ranFirst, _ := drive(t, first, spec)
			l := first.Learned()
			if len(l.Types) == 0 || len(l.Noise) == 0 || len(l.Noise) > maxNoisePoints {
				t.Fatalf("learned %d types, %d noise points", len(l.Types), len(l.Noise))
			}
			second := spec
			second.Prior = prior.For("sig", prior.Entries("sig", l, nil))
			p, err := New("scavenger", second)
			if err != nil {
				t.Fatal(err)
			}
			from := spec.Candidates[0]
			d, ok := p.Start(from)
			if ok {
				from = d.Config
			}
			ran, ds := runFrom(t, p, second, from, noiseGain, func(float64) bool { return true })
			probes := 0
			for _, d := range ds {
				if d.Phase == PhaseProbing && d.WaitSteps > 0 && d.Config != ran[0] {
					probes++
				}
			}
			last := ran[len(ran)-1]
			t.Logf("first run: %d moves; second: started at %s (moved: %v), %d moves, %d probes, ended on %s", len(ranFirst)-1, from, ok, len(ran)-1, probes, last)
			if probes > 1 {
				t.Errorf("second run probed %d times: %v", probes, ran)
			}
			if !nearBest(spec, last, 0.03) {
				t.Errorf("second run ended on %s, not within 3%% of %s", last, bestFor(spec))
			}
			if len(ran)-1 >= len(ranFirst)-1 {
				t.Errorf("second run moved %d times, the first %d", len(ran)-1, len(ranFirst)-1)
			}
		})
	}
}

// TestStoredPointsScaled: earlier measurements of a type that ran twice as
// slow as this job's machine are scaled to it once the job measures one
// configuration, and a configuration nobody measured here is predicted
// from them within the fit's interval.
func TestStoredPointsScaled(t *testing.T) {
	spec := synthSpec(objective.Time, 1e6)
	spec.Prior = truthPrior(spec)
	for typ, ps := range spec.Prior.Points {
		for i := range ps {
			ps[i].StepS *= 2
			ps[i].SyncS *= 2
		}
		spec.Prior.Points[typ] = ps
	}
	p, err := New("scavenger", spec)
	if err != nil {
		t.Fatal(err)
	}
	tr := p.(*partial).t
	c := spec.Candidates[0]
	st := truth[c.Type].StepTime(c.Nodes, c.Workers, c.Local())
	if err := tr.observe(Observation{ElapsedS: 30, Config: c, Steps: 30, StepTime: st, SyncTime: 0, Progress: 30}); err != nil {
		t.Fatal(err)
	}
	ms, err := tr.fit()
	if err != nil {
		t.Fatal(err)
	}
	other := predict.Candidate{Type: c.Type, Nodes: 1, Workers: 4, Batch: 256}
	got := ms.models[c.Type].StepTime(other.Nodes, other.Workers, other.Local())
	want := truth[c.Type].StepTime(other.Nodes, other.Workers, other.Local())
	if math.Abs(got/want-1) > 0.05 {
		t.Errorf("%s predicted %.4g s, truth %.4g s: the stored points were not scaled to this machine", other, got, want)
	}
	if ms.kinds[c.Type] != "fit" || ms.kinds["fast"] != "stored" {
		t.Errorf("kinds %v", ms.kinds)
	}
}

// TestStoredMeasurementsPredictTheirConfigurations: a configuration an
// earlier run measured predicts that measurement, not the fit through every
// point, at this job's level once it has measured another configuration of
// the type; and its own measurement there replaces the stored one.
func TestStoredMeasurementsPredictTheirConfigurations(t *testing.T) {
	spec := synthSpec(objective.Cost, 1e6)
	spec.Prior = truthPrior(spec)
	pts := spec.Prior.Points["fast"]
	odd := &pts[len(pts)/2]
	odd.StepS *= 0.8 // faster than the fit through the others says
	p, err := New("adaptive", spec)
	if err != nil {
		t.Fatal(err)
	}
	tr := p.(*adaptive).t
	interval := func() (lo, pt, hi float64) {
		t.Helper()
		ms, err := tr.fit()
		if err != nil {
			t.Fatal(err)
		}
		return ms.models["fast"].(predict.Ranged).Interval(odd.Nodes, odd.Replicas, odd.LocalBatch)
	}
	if lo, pt, hi := interval(); math.Abs(pt/odd.StepS-1) > 1e-9 || lo != pt || hi != pt {
		t.Errorf("stored measurement %.4g s: predicted [%.4g, %.4g, %.4g], want the measurement, with no width", odd.StepS, lo, pt, hi)
	}
	// This job measures another configuration twice as slow as the truth the stored runs measured.
	var other predict.Candidate
	for _, c := range spec.Candidates {
		if c.Type == "fast" && (c.Nodes != odd.Nodes || c.Workers != odd.Replicas || c.Local() != odd.LocalBatch) {
			other = c
			break
		}
	}
	st := 2 * truth["fast"].StepTime(other.Nodes, other.Workers, other.Local())
	if err := tr.observe(Observation{ElapsedS: 30, Config: other, Steps: 30, StepTime: st, Progress: 30}); err != nil {
		t.Fatal(err)
	}
	// Its level is its measurement over the stored runs' fit there (storedPoints).
	level := st / tr.stored.fits["fast"].StepTime(other.Nodes, other.Workers, other.Local())
	if _, pt, _ := interval(); math.Abs(pt/(level*odd.StepS)-1) > 1e-9 {
		t.Errorf("at this job's level (%.3g times the stored runs'), predicted %.4g s where they measured %.4g s: want %.4g s", level, pt, odd.StepS, level*odd.StepS)
	}
	c := predict.Candidate{Type: "fast", Nodes: odd.Nodes, Workers: odd.Replicas, Batch: int(math.Round(odd.LocalBatch)) * odd.Replicas}
	own := 0.9 * odd.StepS
	if err := tr.observe(Observation{ElapsedS: 60, Config: c, Steps: 30, StepTime: own, Progress: 60}); err != nil {
		t.Fatal(err)
	}
	if _, pt, _ := interval(); math.Abs(pt/own-1) > 1e-9 {
		t.Errorf("after measuring %.4g s itself, the job predicted %.4g s there: want its own measurement", own, pt)
	}
}

// TestStart: a job starts elsewhere only with a prior that has models.
func TestStart(t *testing.T) {
	spec := synthSpec(objective.Time, 1e6)
	from := spec.Candidates[0]
	for _, c := range []struct {
		name, policy string
		prior        *prior.Prior
		moves        bool
	}{
		{"scavenger, no prior", "scavenger", nil, false},
		{"scavenger, the truth stored", "scavenger", truthPrior(spec), true},
		{"adaptive, the truth stored", "adaptive", truthPrior(spec), true},
		{"none, the truth stored", "none", truthPrior(spec), true},
		{"full measures everything", "full", truthPrior(spec), false},
		{"fixed stays", "fixed", truthPrior(spec), false},
		{"a noise curve alone", "scavenger", &prior.Prior{Noise: []prior.NoisePoint{{Samples: 100, Phi: 50}}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := spec
			s.Prior = c.prior
			p, err := New(c.policy, s)
			if err != nil {
				t.Fatal(err)
			}
			d, ok := p.Start(from)
			if ok != c.moves {
				t.Fatalf("start moved: %v (%+v), want %v", ok, d.Config, c.moves)
			}
			if ok && (d.Config == from || d.Chosen < 0 || d.Predictions[d.Chosen].SwitchS != 0) {
				t.Errorf("start %+v: a new place, chosen among predictions that pay no relaunch", d)
			}
			if ok && !nearBest(spec, d.Config, 0.03) {
				t.Errorf("started on %s, not within 3%% of %s", d.Config, bestFor(spec))
			}
		})
	}
}
