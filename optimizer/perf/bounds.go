package perf

import (
	"math"
	"sort"
)

// Bounds are what measured step times imply about any configuration of the
// same machine type without a model, from two physical facts: a step never
// takes less than its own compute, and at fixed nodes and replicas a larger
// local batch takes no less time per step and no more time per sample.
//
//   - Compute: the measured compute of a configuration (step − sync) bounds
//     the compute at any local batch m from below: by itself for a larger m,
//     scaled by m/m_p for a smaller one (no more time per sample). Every
//     configuration's step is at least that (perfect scaling).
//   - Same (nodes, replicas): between two measured local batches m1 < m <
//     m2 the step lies in [max(T1, T2·m/m2), min(T2, T1·m/m1)]; beyond the
//     last one only the side the measurements reach is bounded.
//
// Elsewhere the upper bound is +Inf.
type Bounds struct {
	compute []boundPoint
	groups  map[[2]int][]boundPoint
}

type boundPoint struct{ local, step, compute float64 }

// NewBounds summarises points (the mean of each distinct configuration).
func NewBounds(points []Point) Bounds {
	type key struct {
		n, k int
		m    float64
	}
	sum := map[key]*boundPoint{}
	cnt := map[key]float64{}
	for _, p := range points {
		k := key{p.Nodes, p.Replicas, p.LocalBatch}
		if sum[k] == nil {
			sum[k] = &boundPoint{local: p.LocalBatch}
		}
		sum[k].step += p.StepTime
		sum[k].compute += math.Max(p.StepTime-p.SyncTime, 0)
		cnt[k]++
	}
	b := Bounds{groups: map[[2]int][]boundPoint{}}
	for k, v := range sum {
		bp := boundPoint{local: v.local, step: v.step / cnt[k], compute: v.compute / cnt[k]}
		b.compute = append(b.compute, bp)
		g := [2]int{k.n, k.k}
		b.groups[g] = append(b.groups[g], bp)
	}
	for _, g := range b.groups {
		sort.Slice(g, func(i, j int) bool { return g[i].local < g[j].local })
	}
	return b
}

// At returns the lower and upper bound of the step time at (nodes,
// replicas, local): lo is 0 and hi +Inf where the measurements say nothing.
func (b Bounds) At(nodes, replicas int, local float64) (lo, hi float64) {
	hi = math.Inf(1)
	for _, p := range b.compute {
		if p.local <= local {
			lo = math.Max(lo, p.compute)
		} else {
			lo = math.Max(lo, p.compute*local/p.local)
		}
	}
	for _, p := range b.groups[[2]int{nodes, replicas}] {
		if p.local <= local {
			lo = math.Max(lo, p.step)
			hi = math.Min(hi, p.step*local/p.local)
		} else {
			lo = math.Max(lo, p.step*local/p.local)
			hi = math.Min(hi, p.step)
		}
	}
	return lo, hi
}
