package sim

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/optimizer/prior"
	"github.com/scavenger-ml/scavenger/telemetry"
)

func TestExploreModes(t *testing.T) {
	if os.Getenv("SCAV_EXPLORE") == "" {
		t.Skip()
	}
	traces := os.DirFS(tracesDir(t))
	for _, pol := range []string{"scavenger", "adaptive"} {
		first := map[string][]prior.Entry{}
		reps := map[string]*Report{}
		for _, app := range BenchApps {
			for _, k := range []objective.Kind{objective.Time, objective.Cost} {
				rep, err := Run(context.Background(), Options{FS: traces, App: app, Objective: objective.Objective{Kind: k}, Policy: pol})
				if err != nil {
					t.Fatal(err)
				}
				first[app] = MergeStore(first[app], rep.Learned)
				reps[app+string(k)] = rep
			}
		}
		for _, app := range BenchApps {
			var others []prior.Entry
			for _, o := range BenchApps {
				if o != app {
					others = append(others, first[o]...)
				}
			}
			for _, k := range []objective.Kind{objective.Time, objective.Cost} {
				f := reps[app+string(k)]
				l, err := Run(context.Background(), Options{FS: traces, App: app, Objective: objective.Objective{Kind: k}, Policy: pol, Store: others})
				if err != nil {
					t.Fatal(err)
				}
				s, err := Run(context.Background(), Options{FS: traces, App: app, Objective: objective.Objective{Kind: k}, Policy: pol, Store: f.Learned})
				if err != nil {
					t.Fatal(err)
				}
				ov := func(r *Report) float64 {
					if k == objective.Cost {
						return pct(r.CostUSD, r.Oracle.CostUSD)
					}
					return pct(r.JCTS, r.Oracle.JCTS)
				}
				t.Logf("%-9s %-11s %-4s oracle %5.0fs | first %+6.1f%% r%d p%d ste %4.1f/%5.1f | loao %+6.1f%% r%d p%d ste %4.1f/%5.1f | second %+6.1f%% r%d p%d start %v",
					pol, app, k, f.Oracle.JCTS, ov(f), f.Relaunches, f.Probes, f.StepTimeError.MedianPct, f.StepTimeError.P90Pct,
					ov(l), l.Relaunches, l.Probes, l.StepTimeError.MedianPct, l.StepTimeError.P90Pct, ov(s), s.Relaunches, s.Probes, s.StartedAt != nil)
			}
		}
	}
}

func TestExploreRatios(t *testing.T) {
	if os.Getenv("SCAV_EXPLORE") == "" {
		t.Skip()
	}
	traces := os.DirFS(tracesDir(t))
	first := map[string][]prior.Entry{}
	for _, app := range BenchApps {
		for _, k := range []objective.Kind{objective.Time, objective.Cost} {
			rep, err := Run(context.Background(), Options{FS: traces, App: app, Objective: objective.Objective{Kind: k}, Policy: "scavenger"})
			if err != nil {
				t.Fatal(err)
			}
			first[app] = MergeStore(first[app], rep.Learned)
		}
		for _, e := range first[app] {
			t.Logf("%s %s: %d points", app, e.Type, len(e.Points))
		}
	}
	for _, app := range BenchApps {
		p := prior.For("x", first[app])
		for pair, r := range p.Speed {
			t.Logf("%s alone: %v ratio %.3f (n %d)", app, pair, math.Exp(r.LogMean), r.N)
		}
		// truth: median ratio over candidates measured on both types
		opts := Options{FS: traces, App: app}
		w, _ := load(&opts)
		for _, a := range w.types {
			for _, b := range w.types {
				if a >= b {
					continue
				}
				var ls []float64
				for _, c := range w.cands {
					if c.Type != a {
						continue
					}
					d := c
					d.Type = b
					x, _ := w.stepTime(c)
					y, _ := w.stepTime(d)
					if !math.IsNaN(y) {
						ls = append(ls, y/x)
					}
				}
				sort.Float64s(ls)
				if len(ls) > 0 {
					t.Logf("%s truth %s/%s: median %.3f p10 %.3f p90 %.3f (n %d)", app, b, a, Quantile(ls, .5), Quantile(ls, .1), Quantile(ls, .9), len(ls))
				}
			}
		}
	}
}

func TestExploreTrace(t *testing.T) {
	app, obj, pol := os.Getenv("SCAV_APP"), os.Getenv("SCAV_OBJ"), os.Getenv("SCAV_POL")
	if app == "" {
		t.Skip()
	}
	traces := os.DirFS(tracesDir(t))
	var types []string
	if v := os.Getenv("SCAV_TYPES"); v != "" {
		types = []string{v}
	}
	rep, err := Run(context.Background(), Options{FS: traces, App: app, Types: types, Objective: objective.Objective{Kind: objective.Kind(obj)}, Policy: pol,
		Tap: func(r telemetry.StepRecord, d *policy.Decision) {
			if d != nil && (d.Config.Workers != r.World || d.Config.Batch != r.GlobalBatch || d.Commit) {
				t.Logf("t=%6.0f step %6d %s -> %s [%s] %s", r.Time, r.Step, fmt.Sprintf("%d/%d", r.World, r.GlobalBatch), d.Config, d.Phase, d.Reason)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("jct %.0f cost %.2f oracle %+v relaunches %d", rep.JCTS, rep.CostUSD, rep.Oracle, rep.Relaunches)
}

func TestExploreCadence(t *testing.T) {
	if os.Getenv("SCAV_EXPLORE") == "" {
		t.Skip()
	}
	traces := os.DirFS(tracesDir(t))
	for _, pol := range []string{"scavenger", "adaptive"} {
		for _, app := range BenchApps {
			for _, k := range []objective.Kind{objective.Time, objective.Cost} {
				o := Options{FS: traces, App: app, Objective: objective.Objective{Kind: k}, Policy: pol}
				a, err := Run(context.Background(), o)
				if err != nil {
					t.Fatal(err)
				}
				o.ReportSteps = 10
				start := time.Now()
				b, err := Run(context.Background(), o)
				if err != nil {
					t.Fatal(err)
				}
				ov := func(r *Report) float64 {
					if k == objective.Cost {
						return pct(r.CostUSD, r.Oracle.CostUSD)
					}
					return pct(r.JCTS, r.Oracle.JCTS)
				}
				t.Logf("%-9s %-11s %-4s 30s: %+6.1f%% r%d | 10 steps: %+6.1f%% r%d (%s)", pol, app, k, ov(a), a.Relaunches, ov(b), b.Relaunches, time.Since(start))
			}
		}
	}
}

func TestExploreOneNode(t *testing.T) {
	if os.Getenv("SCAV_EXPLORE") == "" {
		t.Skip()
	}
	traces := os.DirFS(tracesDir(t))
	gpus := map[string]int{"aws": 4, "azure": 8, "dgx-ext": 8}
	for _, app := range BenchApps {
		opts := Options{FS: traces, App: app}
		w, _ := load(&opts)
		var bs []int
		for b := range w.vals {
			bs = append(bs, b)
		}
		sort.Ints(bs)
		for _, typ := range DefaultTypes {
			var cands []predict.Candidate
			for k := 1; k <= gpus[typ]; k++ {
				for _, b := range bs {
					if b%k == 0 && len(w.rows[nk{typ, 1, k}]) > 0 {
						cands = append(cands, predict.Candidate{Type: typ, Nodes: 1, Workers: k, Batch: b})
					}
				}
			}
			for _, k := range []objective.Kind{objective.Time, objective.Cost} {
				start := time.Now()
				r, err := Run(context.Background(), Options{FS: traces, App: app, Types: []string{typ}, Candidates: cands, Objective: objective.Objective{Kind: k}, Policy: "scavenger",
					ReportSteps: 10, Stepwise: true})
				if err != nil {
					t.Logf("%s %s %s: %v", app, typ, k, err)
					continue
				}
				ov := pct(r.JCTS, r.Oracle.JCTS)
				if k == objective.Cost {
					ov = pct(r.CostUSD, r.Oracle.CostUSD)
				}
				t.Logf("%-11s %-7s %-4s %d cands oracle %s:%d:%d %6.0fs  jct %6.0fs over %+6.1f r%d (%s)", app, typ, k, len(cands), r.Oracle.Type, r.Oracle.Workers, r.Oracle.Batch, r.Oracle.JCTS, r.JCTS, ov, r.Relaunches, time.Since(start).Round(time.Millisecond))
			}
		}
	}
}

func TestExplorePort(t *testing.T) {
	if os.Getenv("SCAV_EXPLORE") == "" {
		t.Skip()
	}
	traces := os.DirFS(tracesDir(t))
	o := Options{FS: traces, App: "ncf"}
	w, _ := load(&o)
	a, b := w.stepTime(predict.Candidate{Type: "aws", Nodes: 1, Workers: 1, Batch: 256})
	c, d := w.stepTime(predict.Candidate{Type: "aws", Nodes: 1, Workers: 4, Batch: 32768})
	t.Logf("ncf %g %g %v %v %v %v", w.m0, w.target, a, b, c, d)
	o = Options{FS: traces, App: "deepspeech2"}
	w, _ = load(&o)
	e, _ := w.stepTime(predict.Candidate{Type: "dgx-ext", Nodes: 1, Workers: 8, Batch: 640})
	steps, _, _ := w.run(predict.Candidate{Type: "dgx-ext", Nodes: 1, Workers: 1, Batch: 20}, 0, math.Inf(1))
	s, v := w.grad(20, 100)
	t.Logf("ds2 %g %g %v steps %v grad %v %v", w.m0, w.target, e, steps, s, v)
}

func TestExploreReplayRef(t *testing.T) {
	app, typ, obj := os.Getenv("SCAV_APP"), os.Getenv("SCAV_TYPE"), os.Getenv("SCAV_OBJ")
	if app == "" || typ == "" {
		t.Skip()
	}
	traces := os.DirFS(tracesDir(t))
	o := Options{FS: traces, App: app}
	w, _ := load(&o)
	var bs []int
	for b := range w.vals {
		bs = append(bs, b)
	}
	sort.Ints(bs)
	g := map[string]int{"aws": 4, "azure": 8, "dgx-ext": 8}[typ]
	var cands []predict.Candidate
	for k := 1; k <= g; k++ {
		for _, b := range bs {
			if b%k == 0 {
				cands = append(cands, predict.Candidate{Type: typ, Nodes: 1, Workers: k, Batch: b})
			}
		}
	}
	r, err := Run(context.Background(), Options{FS: traces, App: app, Types: []string{typ}, Candidates: cands, Objective: objective.Objective{Kind: objective.Kind(obj)}, Policy: "scavenger",
		ReportSteps: 10, Stepwise: true, Tap: func(r telemetry.StepRecord, d *policy.Decision) {
			if d != nil && (d.Config.Workers != r.World || d.Config.Batch != r.GlobalBatch) {
				t.Logf("step %d t=%.1f %d/%d -> %s [%s] %s", r.Step, r.Time, r.World, r.GlobalBatch, d.Config, d.Phase, d.Reason)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range r.History {
		t.Logf("%+v", h)
	}
	t.Logf("jct %.1f oracle %.1f %+v", r.JCTS, r.Oracle.JCTS, r.Oracle)
}
