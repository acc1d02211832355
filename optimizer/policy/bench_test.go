package policy

import (
	"fmt"
	"math"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/perf"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// largeSpec has 20 types × 64 worker counts × 10 batches = 12 800 candidates.
func largeSpec(kind objective.Kind) Spec {
	spec := Spec{Prices: map[string]float64{}, M0: 32, Target: 1e6, Objective: objective.Objective{Kind: kind}, RelaunchS: 30}
	for t := 0; t < 20; t++ {
		typ := fmt.Sprintf("type%02d", t)
		spec.Prices[typ] = 1 + float64(t)
		for k := 1; k <= 64; k++ {
			nodes := (k + 7) / 8
			for b := 0; b < 10; b++ {
				spec.Candidates = append(spec.Candidates, predict.Candidate{Type: typ, Nodes: nodes, Workers: k, Batch: k * 8 << (b % 5)})
			}
		}
	}
	return spec
}

// BenchmarkDecision measures one decision as adaptive takes it at every
// report — predict every candidate with its 90 % interval, choose on the
// expected totals, and value every probe (expected improvement, cost) —
// over at least 10 000 candidates with models fitted by perf.Fit (guards,
// cross-validation, bounds), for each objective. Issue 14's target is 20 ms.
func BenchmarkDecision(b *testing.B) {
	for _, kind := range []objective.Kind{objective.Time, objective.Cost, objective.Knee} {
		b.Run(string(kind), func(b *testing.B) {
			spec := largeSpec(kind)
			if err := spec.validate(); err != nil {
				b.Fatal(err)
			}
			tr := newTracker(spec)
			cur := spec.Candidates[0]
			for _, c := range spec.Candidates[:40] {
				st := truth["fast"].StepTime(c.Nodes, c.Workers, c.Local())
				if err := tr.observe(Observation{Config: c, Steps: 20, StepTime: st, SyncTime: 0, Grad: gns.Expected(1, 4, 32, c.Local(), c.Workers), Progress: 10}); err != nil {
					b.Fatal(err)
				}
			}
			tr.last.Config = cur
			var pts []perf.Point
			for _, c := range []predict.Candidate{{Nodes: 1, Workers: 1, Batch: 8}, {Nodes: 1, Workers: 8, Batch: 64}, {Nodes: 1, Workers: 8, Batch: 1024}, {Nodes: 8, Workers: 64, Batch: 8192}} {
				st := truth["fast"].StepTime(c.Nodes, c.Workers, c.Local())
				pts = append(pts, perf.Point{Nodes: c.Nodes, Replicas: c.Workers, LocalBatch: c.Local(), StepTime: st, SyncTime: math.Min(truth["fast"].Sync(c.Nodes, c.Workers), st)})
			}
			f, err := perf.Fit(pts)
			if err != nil {
				b.Fatal(err)
			}
			ms := typeModels{models: map[string]predict.StepTimer{}}
			for typ := range spec.Prices {
				ms.models[typ] = f
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d, err := tr.decide(ms)
				if err != nil || len(d.Predictions) < 10000 {
					b.Fatalf("%d predictions, %v", len(d.Predictions), err)
				}
				// adaptive's decision also values every probe.
				tr.nextProbe(d.Predictions)
			}
		})
	}
}
