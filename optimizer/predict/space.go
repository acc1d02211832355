package predict

import (
	"fmt"
	"sort"
)

// Shape is what the search space needs to know of a machine type.
type Shape struct {
	// Type names the machine type.
	Type string
	// GPUsPerNode is the number of workers one node holds.
	GPUsPerNode int
	// MaxNodes caps the nodes of one configuration.
	MaxNodes int
}

// Limits bound the enumerated candidates; zero fields are unbounded.
type Limits struct {
	MinWorkers, MaxWorkers int
	MinLocal, MaxLocal     float64
}

// Enumerate builds the search space the way the simulator does from traces,
// for a live job: per type, packed placements only — one node with 1..G
// workers, or N ≥ 2 full nodes with N·G workers — times every global batch in
// batches with B ≥ K and the local batch B/K within limits. Candidates come
// out by type (in shapes' order), then workers, then batch.
func Enumerate(shapes []Shape, batches []int, lim Limits) ([]Candidate, error) {
	bs := append([]int(nil), batches...)
	sort.Ints(bs)
	var out []Candidate
	for _, s := range shapes {
		if s.Type == "" || s.GPUsPerNode < 1 || s.MaxNodes < 1 {
			return nil, fmt.Errorf("enumerate type %q: %w: %d GPUs per node, %d nodes", s.Type, ErrBadCandidate, s.GPUsPerNode, s.MaxNodes)
		}
		type nk struct{ n, k int }
		var shapes []nk
		for k := 1; k <= s.GPUsPerNode; k++ {
			shapes = append(shapes, nk{1, k})
		}
		for n := 2; n <= s.MaxNodes; n++ {
			shapes = append(shapes, nk{n, n * s.GPUsPerNode})
		}
		for _, sh := range shapes {
			if (lim.MinWorkers > 0 && sh.k < lim.MinWorkers) || (lim.MaxWorkers > 0 && sh.k > lim.MaxWorkers) {
				continue
			}
			for _, b := range bs {
				l := float64(b) / float64(sh.k)
				if b < sh.k || (lim.MinLocal > 0 && l < lim.MinLocal) || (lim.MaxLocal > 0 && l > lim.MaxLocal) {
					continue
				}
				out = append(out, Candidate{Type: s.Type, Nodes: sh.n, Workers: sh.k, Batch: b})
			}
		}
	}
	return out, nil
}
