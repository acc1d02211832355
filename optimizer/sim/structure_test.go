package sim

import (
	"math"
	"os"
	"sort"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/perf"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// perK is the alternative structure TestModelStructure compares with
// Pollux's: per measured (nodes, K) group, step time affine in local batch
// (least squares); unmeasured groups interpolate the coefficients linearly
// in K between measured groups of the same regime (one node or several).
type perK struct{ gs []grp }

type grp struct {
	n, k int
	a, b float64
}

func fitPerK(pts []perf.Point) perK {
	type key struct{ n, k int }
	by := map[key][]perf.Point{}
	for _, p := range pts {
		by[key{p.Nodes, p.Replicas}] = append(by[key{p.Nodes, p.Replicas}], p)
	}
	var m perK
	for k, ps := range by {
		var xs, ys []float64
		for _, p := range ps {
			xs = append(xs, p.LocalBatch)
			ys = append(ys, p.StepTime)
		}
		a, b := perf.Line(xs, ys)
		m.gs = append(m.gs, grp{k.n, k.k, a, b})
	}
	sort.Slice(m.gs, func(i, j int) bool { return m.gs[i].k < m.gs[j].k })
	return m
}
func (m perK) StepTime(n, k int, l float64) float64 {
	var lo, hi *grp
	for i := range m.gs {
		g := &m.gs[i]
		if (g.n > 1) != (n > 1) && len(m.gs) > 1 {
			continue
		}
		if g.k <= k && (lo == nil || g.k > lo.k) {
			lo = g
		}
		if g.k >= k && (hi == nil || g.k < hi.k) {
			hi = g
		}
	}
	if lo == nil && hi == nil {
		lo = &m.gs[0]
		hi = lo
	}
	if lo == nil {
		lo = hi
	}
	if hi == nil {
		hi = lo
	}
	f := 0.0
	if hi.k != lo.k {
		f = float64(k-lo.k) / float64(hi.k-lo.k)
	}
	a := lo.a + f*(hi.a-lo.a)
	b := lo.b + f*(hi.b-lo.b)
	return math.Max(a+b*l, 1e-6)
}

// TestModelStructure compares Pollux's form with the per-(nodes, K) affine
// structure, fitted on all packed measurements of a type and on a generous
// probe set (every third candidate), over the type's candidates (the probe
// set's own candidates excluded). Run with SCAV_MODEL_ADEQUACY=1 -v.
func TestModelStructure(t *testing.T) {
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
			var all []perf.Point
			var cands []predict.Candidate
			for _, c := range w.cands {
				if c.Type == typ {
					cands = append(cands, c)
				}
			}
			for key, rs := range w.rows {
				if key.typ != typ {
					continue
				}
				for _, r := range rs {
					all = append(all, perf.Point{Nodes: key.n, Replicas: key.k, LocalBatch: r.local, StepTime: r.step, SyncTime: math.Min(r.sync, r.step)})
				}
			}
			// probe set: candidates themselves as points (what policies measure): corners + full node
			pt := func(c predict.Candidate) perf.Point {
				st, sy := w.stepTime(c)
				return perf.Point{Nodes: c.Nodes, Replicas: c.Workers, LocalBatch: c.Local(), StepTime: st, SyncTime: math.Min(sy, st)}
			}
			sort.Slice(cands, func(i, j int) bool {
				if cands[i].Workers != cands[j].Workers {
					return cands[i].Workers < cands[j].Workers
				}
				return cands[i].Batch < cands[j].Batch
			})
			var probes []perf.Point
			probeSet := map[predict.Candidate]bool{}
			// every candidate at 1/3 stride: a generous probe set
			for i, c := range cands {
				if i%3 == 0 {
					probes = append(probes, pt(c))
					probeSet[c] = true
				}
			}
			eval := func(m predict.StepTimer, skip map[predict.Candidate]bool) (float64, float64) {
				var errs []float64
				for _, c := range cands {
					if skip[c] {
						continue
					}
					st, _ := w.stepTime(c)
					errs = append(errs, 100*math.Abs(m.StepTime(c.Nodes, c.Workers, c.Local())-st)/st)
				}
				sort.Float64s(errs)
				return Quantile(errs, .5), Quantile(errs, .9)
			}
			fa, _ := perf.Fit(all)
			fp, _ := perf.Fit(probes)
			a1, a2 := eval(fa, nil)
			b1, b2 := eval(fitPerK(all), nil)
			c1, c2 := eval(fp, probeSet)
			d1, d2 := eval(fitPerK(probes), probeSet)
			t.Logf("%s %s: median/p90 %% on all points: pollux %.1f/%.1f perK %.1f/%.1f | on every third candidate (%d): pollux %.1f/%.1f perK %.1f/%.1f", app, typ, a1, a2, b1, b2, len(probes), c1, c2, d1, d2)
		}
	}
}
