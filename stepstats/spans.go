package stepstats

import (
	"math"
	"sort"
)

// Span is a run of consecutive steps, From to To, with a world (the ranks
// each of its steps should have; unused where a set of spans only says
// which steps were seen). Its fields are its JSON form.
type Span struct {
	From int64 `json:"f"`
	To   int64 `json:"t"`
	W    int   `json:"w,omitempty"`
}

// maxSpans bounds a span list: past it the two oldest spans merge (see Add
// and Raise).
const maxSpans = 1024

// Spans is a sorted list of disjoint spans.
type Spans []Span

// find is the index of the span holding step, or where one would go.
func (ss Spans) find(step int64) (int, bool) {
	i := sort.Search(len(ss), func(i int) bool { return ss[i].To >= step })
	return i, i < len(ss) && ss[i].From <= step
}

// Add adds step to a set of steps and reports whether it was new. Past
// maxSpans the two oldest spans merge: the steps between them count as seen
// from then on, and swallowed says how many they were.
func (ss *Spans) Add(step int64) (added bool, swallowed int64) {
	s := *ss
	i, in := s.find(step)
	if in {
		return false, 0
	}
	joinPrev := i > 0 && s[i-1].To == step-1
	joinNext := i < len(s) && s[i].From == step+1
	switch {
	case joinPrev && joinNext:
		s[i-1].To = s[i].To
		s = append(s[:i], s[i+1:]...)
	case joinPrev:
		s[i-1].To = step
	case joinNext:
		s[i].From = step
	default:
		s = insertAt(s, i, Span{From: step, To: step})
	}
	if len(s) > maxSpans {
		swallowed = width(s[0].To+1, s[1].From-1)
		s[1].From = s[0].From
		s = s[1:]
	}
	*ss = s
	return true, swallowed
}

// Raise makes the world of step at least w in a list of worlds. Past
// maxSpans the two oldest spans merge, with the larger world.
func (ss *Spans) Raise(step int64, w int) {
	s := *ss
	i, in := s.find(step)
	switch {
	case in && s[i].W >= w:
		return
	case in: // split the span around step
		sp := s[i]
		var parts []Span
		if sp.From < step {
			parts = append(parts, Span{From: sp.From, To: step - 1, W: sp.W})
		}
		parts = append(parts, Span{From: step, To: step, W: w})
		if step < sp.To {
			parts = append(parts, Span{From: step + 1, To: sp.To, W: sp.W})
		}
		s = append(s[:i], append(parts, s[i+1:]...)...)
	case i > 0 && s[i-1].To == step-1 && s[i-1].W == w:
		s[i-1].To = step
		if i < len(s) && s[i].From == step+1 && s[i].W == w {
			s[i-1].To = s[i].To
			s = append(s[:i], s[i+1:]...)
		}
	case i < len(s) && s[i].From == step+1 && s[i].W == w:
		s[i].From = step
	default:
		s = insertAt(s, i, Span{From: step, To: step, W: w})
	}
	if len(s) > maxSpans {
		s[1].From, s[1].W = s[0].From, max(s[0].W, s[1].W)
		s = s[1:]
	}
	*ss = s
}

// Weighted is the sum, over the steps first to last, of each step's world
// in the list (1 for a step no span holds), saturated at MaxInt64.
func (ss Spans) Weighted(first, last int64) int64 {
	if last < first {
		return 0
	}
	total, covered := int64(0), int64(0)
	for _, s := range ss {
		from, to := max(s.From, first), min(s.To, last)
		if from > to {
			continue
		}
		n := width(from, to)
		covered = satAdd(covered, n)
		total = satAdd(total, satMul(n, int64(max(s.W, 1))))
	}
	return satAdd(total, max(0, width(first, last)-covered))
}

// width is the number of steps from to to (to ≥ from), saturated.
func width(from, to int64) int64 {
	if to < from {
		return 0
	}
	if d := uint64(to) - uint64(from); d < math.MaxInt64 {
		return int64(d) + 1
	}
	return math.MaxInt64
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}
