package stepstats

import (
	"math"
	"sort"
)

// Hist keeps positive values (step times) in buckets Res to a doubling,
// each bucket with the count of its values, the first of them (Bases) and
// the sum of the others' differences from it (Devs), so that a median
// over any number of values costs a few thousand numbers at most: the
// median of a Hist is the mean of the bucket it falls in (of the two it
// falls between), exact when the values of that bucket are equal and
// within a bucket's width, 1/Res of a doubling (0.27% at histRes), of the
// exact median otherwise. Past histMaxBuckets buckets Res halves and
// neighbouring buckets merge. The zero value is empty. Its fields are its
// JSON form.
type Hist struct {
	Res    int       `json:"res,omitempty"`
	Keys   []int32   `json:"k,omitempty"`
	Counts []int64   `json:"n,omitempty"`
	Bases  []float64 `json:"b,omitempty"`
	Devs   []float64 `json:"d,omitempty"`
}

const (
	// histRes is a new Hist's buckets per doubling.
	histRes = 256
	// histMaxBuckets bounds a Hist's buckets.
	histMaxBuckets = 1024
)

// Add counts v; values that are not finite and positive are left out.
func (h *Hist) Add(v float64) {
	if !(v > 0) || math.IsInf(v, 0) {
		return
	}
	if h.Res == 0 {
		h.Res = histRes
	}
	k := int32(math.Floor(math.Log2(v) * float64(h.Res)))
	i := sort.Search(len(h.Keys), func(i int) bool { return h.Keys[i] >= k })
	if i < len(h.Keys) && h.Keys[i] == k {
		h.Counts[i]++
		h.Devs[i] += v - h.Bases[i]
		return
	}
	h.Keys = insertAt(h.Keys, i, k)
	h.Counts = insertAt(h.Counts, i, 1)
	h.Bases = insertAt(h.Bases, i, v)
	h.Devs = insertAt(h.Devs, i, 0)
	for len(h.Keys) > histMaxBuckets && h.Res > 1 {
		h.coarsen()
	}
}

// coarsen halves the resolution, merging each pair of buckets.
func (h *Hist) coarsen() {
	h.Res /= 2
	n := 0
	for i, k := range h.Keys {
		k = floorHalf(k)
		if n > 0 && h.Keys[n-1] == k {
			h.Devs[n-1] += h.Devs[i] + float64(h.Counts[i])*(h.Bases[i]-h.Bases[n-1])
			h.Counts[n-1] += h.Counts[i]
			continue
		}
		h.Keys[n], h.Counts[n], h.Bases[n], h.Devs[n] = k, h.Counts[i], h.Bases[i], h.Devs[i]
		n++
	}
	h.Keys, h.Counts, h.Bases, h.Devs = h.Keys[:n], h.Counts[:n], h.Bases[:n], h.Devs[:n]
}

// floorHalf is k/2 rounded down.
func floorHalf(k int32) int32 {
	if k < 0 {
		return -((-k + 1) / 2)
	}
	return k / 2
}

// N is the number of values counted.
func (h *Hist) N() int64 {
	var n int64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Median is the median of the values (0 when there are none), as the
// type's comment says.
func (h *Hist) Median() float64 {
	n := h.N()
	if n == 0 {
		return 0
	}
	return (h.nth((n-1)/2) + h.nth(n/2)) / 2
}

// nth is the value of the i-th smallest value's bucket (its mean).
func (h *Hist) nth(i int64) float64 {
	for b, c := range h.Counts {
		if i < c {
			return h.Bases[b] + h.Devs[b]/float64(c)
		}
		i -= c
	}
	return 0
}

// insertAt inserts v at i in s.
func insertAt[T any](s []T, i int, v T) []T {
	var zero T
	s = append(s, zero)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}
