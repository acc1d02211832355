package stepstats

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// history is a job's step records as they come: two attempts of two ranks
// (the second goes back to a checkpoint and repeats steps), a record lost,
// one sent twice, ranks out of order, a loss that went NaN at the end.
func history() []telemetry.StepRecord {
	rng := rand.New(rand.NewPCG(1, 2))
	var recs []telemetry.StepRecord
	add := func(attempt int, from, to int64, batch int) {
		for s := from; s <= to; s++ {
			for _, rank := range []int{1, 0} {
				if s == 17 && rank == 1 {
					continue // lost
				}
				loss := 3 - float64(s)/100
				if s == 140 {
					loss = math.NaN()
				}
				local, avg, c, y := 3+rng.Float64(), 2+rng.Float64()/2, 0.08, 0.02
				recs = append(recs, telemetry.StepRecord{V: 1, Job: "j", Attempt: attempt, Rank: rank, World: 2, Step: s,
					Time: float64(attempt*1000) + float64(s)*0.1, Seconds: 0.1 + rng.Float64()/50, LocalBatch: batch / 2, GlobalBatch: batch,
					ComputeSeconds: &c, SyncSeconds: &y, Loss: &loss, LocalSqr: &local, AvgSqr: &avg})
			}
		}
	}
	add(1, 1, 100, 64)
	add(2, 91, 140, 128) // steps 91..100 again, from the checkpoint
	recs = append(recs, recs[30])
	return recs
}

// TestAggregateKeptInPartsIsTheWhole: an aggregate kept as the records come,
// stored (JSON) and taken up again between them, is the aggregate of them
// all at once: the same summary, attempts' step times and live figures.
func TestAggregateKeptInPartsIsTheWhole(t *testing.T) {
	recs := history()
	whole := NewAggregate(64)
	for _, r := range recs {
		whole.Add(r)
	}
	parts := NewAggregate(64)
	for i, r := range recs {
		parts.Add(r)
		if i%37 == 0 { // saved and read back
			b, err := json.Marshal(parts)
			if err != nil {
				t.Fatal(err)
			}
			parts = Aggregate{}
			if err := json.Unmarshal(b, &parts); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, b := whole.Summary(), parts.Summary()
	if !reflect.DeepEqual(nanless(a), nanless(b)) || !math.IsNaN(a.LastLoss) || !math.IsNaN(b.LastLoss) {
		t.Errorf("summaries differ:\n%+v\n%+v", a, b)
	}
	if x, y := whole.AttemptStepS(), parts.AttemptStepS(); !reflect.DeepEqual(x, y) || len(x) != 2 {
		t.Errorf("attempts' step times %v and %v", x, y)
	}
	if whole.Live.Step != 140 || whole.Live.Step != parts.Live.Step || whole.Live.NoiseScale() != parts.Live.NoiseScale() ||
		whole.Live.Rate.PerSecond() != parts.Live.Rate.PerSecond() || whole.Live.NoiseScale() == 0 {
		t.Errorf("live figures differ: %+v, %+v", whole.Live, parts.Live)
	}
	// What the summary says of the history.
	if a.Records != len(recs) || a.Ranks != 2 || a.FirstStep != 1 || a.LastStep != 140 || a.Missing != 1 || a.Duplicates != 21 || a.GlobalBatch != 128 {
		t.Errorf("summary %+v: want %d records of 2 ranks, steps 1..140, 1 missing, 21 duplicated, batch 128", a, len(recs))
	}
	if a.FirstLoss != 3-0.01 {
		t.Errorf("first loss %v, want that of step 1", a.FirstLoss)
	}
}

// nanless is s with NaN losses zeroed (NaN equals nothing).
func nanless(s Summary) Summary {
	if math.IsNaN(s.FirstLoss) {
		s.FirstLoss = 0
	}
	if math.IsNaN(s.LastLoss) {
		s.LastLoss = 0
	}
	return s
}

// TestAggregateOrder: the order records come in changes no figure of the
// summary but the sums' rounding: shuffled, the summary is the same within
// it.
func TestAggregateOrder(t *testing.T) {
	recs := history()
	a := Summarize(recs)
	// A shuffle that keeps each (rank, step)'s records in their order, so
	// that the same record of a repeated step comes first.
	rng := rand.New(rand.NewPCG(3, 4))
	group := map[[2]int64]float64{}
	for _, r := range recs {
		k := [2]int64{int64(r.Rank), r.Step}
		if _, ok := group[k]; !ok {
			group[k] = rng.Float64()
		}
	}
	shuffled := slices.Clone(recs)
	sort.SliceStable(shuffled, func(x, y int) bool {
		return group[[2]int64{int64(shuffled[x].Rank), shuffled[x].Step}] < group[[2]int64{int64(shuffled[y].Rank), shuffled[y].Step}]
	})
	b := Summarize(shuffled)
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(x)) }
	if a.Records != b.Records || a.Missing != b.Missing || a.Duplicates != b.Duplicates || a.FirstStep != b.FirstStep || a.LastStep != b.LastStep ||
		a.GlobalBatch != b.GlobalBatch || !near(a.ComputeFrac, b.ComputeFrac) || !near(a.Noise, b.Noise) || a.FirstLoss != b.FirstLoss {
		t.Errorf("shuffled:\n%+v\n%+v", a, b)
	}
}

// TestHist: the median of equal values is exact; of spread values within a
// bucket's width of the exact one; past its bound a Hist coarsens and stays
// within the coarser width.
func TestHist(t *testing.T) {
	var h Hist
	for i := 0; i < 1000; i++ {
		h.Add(0.3)
	}
	if m := h.Median(); m != 0.3 {
		t.Errorf("median of 1000 times 0.3: %v", m)
	}
	h = Hist{}
	for _, v := range []float64{0.1, 0.2, 0.3, 0.4, 0, -1, math.Inf(1), math.NaN()} {
		h.Add(v)
	}
	if m := h.Median(); m != 0.25 || h.N() != 4 {
		t.Errorf("median of 0.1..0.4: %v of %d values", m, h.N())
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, spread := range []float64{1.2, 1e6} { // the second coarsens
		h = Hist{}
		var vs []float64
		for i := 0; i < 20001; i++ {
			v := math.Pow(spread, rng.Float64())
			vs = append(vs, v)
			h.Add(v)
		}
		exact := Median(vs)
		width := math.Pow(2, 1/float64(h.Res)) - 1
		if m := h.Median(); math.Abs(m-exact)/exact > width || len(h.Keys) > histMaxBuckets {
			t.Errorf("spread %g: median %v, exact %v: off by %.3g%% (bucket %.3g%%), %d buckets", spread, m, exact,
				100*math.Abs(m-exact)/exact, 100*width, len(h.Keys))
		}
	}
}

// TestSummarizeFarSteps: steps far apart (up to the largest step a record
// can name) are counted, not walked: the summary comes at once, its missing
// records saturated rather than wrapped.
func TestSummarizeFarSteps(t *testing.T) {
	recs := []telemetry.StepRecord{
		{Job: "j", World: 1, Step: 1, Seconds: 0.1},
		{Job: "j", World: 4, Step: math.MaxInt64, Seconds: 0.1},
		{Job: "j", World: 4, Step: math.MaxInt64 - 1, Rank: 3, Seconds: 0.1},
	}
	s := Summarize(recs)
	if s.FirstStep != 1 || s.LastStep != math.MaxInt64 || s.Missing != math.MaxInt64-3 {
		t.Errorf("summary %+v", s)
	}
}

// TestSpans: a set of steps tells a new step from a repeated one, merges
// neighbours, and past its bound merges its oldest spans, counting the
// steps it took in; a list of worlds splits a span where a step's world
// grows and sums them.
func TestSpans(t *testing.T) {
	var seen Spans
	for _, s := range []int64{5, 7, 6, 1, 3, 2} {
		if added, _ := seen.Add(s); !added {
			t.Errorf("step %d counted as repeated", s)
		}
	}
	if added, _ := seen.Add(6); added {
		t.Error("step 6 again counted as new")
	}
	if !reflect.DeepEqual(seen, Spans{{From: 1, To: 3}, {From: 5, To: 7}}) {
		t.Errorf("spans %v", seen)
	}
	var far Spans
	swallowed := int64(0)
	for s := int64(0); s <= 2*maxSpans+2; s += 2 {
		_, n := far.Add(s)
		swallowed += n
	}
	// maxSpans+2 steps two apart: the two merges of the oldest each took one step in.
	if len(far) != maxSpans || swallowed != 2 || far[0].From != 0 || far[0].To != 4 {
		t.Errorf("%d spans from %v, %d steps swallowed; want %d, from 0..4, 2", len(far), far[0], swallowed, maxSpans)
	}
	var worlds Spans
	for s := int64(1); s <= 10; s++ {
		worlds.Raise(s, 2)
	}
	worlds.Raise(4, 4)
	worlds.Raise(4, 1)
	if !reflect.DeepEqual(worlds, Spans{{From: 1, To: 3, W: 2}, {From: 4, To: 4, W: 4}, {From: 5, To: 10, W: 2}}) {
		t.Errorf("worlds %v", worlds)
	}
	if n := worlds.Weighted(0, 12); n != 3*2+4+6*2+3 {
		t.Errorf("weighted 0..12: %d, want 25 (3 steps no span holds count 1)", n)
	}
}

// TestNumJSON: a NaN or infinite loss is stored and read back as such.
func TestNumJSON(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0.25} {
		b, err := json.Marshal(Num(v))
		if err != nil {
			t.Fatal(err)
		}
		var n Num
		if err := json.Unmarshal(b, &n); err != nil || !(float64(n) == v || math.IsNaN(v) && math.IsNaN(float64(n))) {
			t.Errorf("%v as %s read back as %v, %v", v, b, n, err)
		}
	}
}
