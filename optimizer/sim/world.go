package sim

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/optimizer/price"
	"github.com/scavenger-ml/scavenger/optimizer/trace"
)

// world is the ground truth of one application, built from its traces. Only
// the simulator reads it; policies see telemetry.
type world struct {
	app    *trace.App
	types  []string
	gpus   map[string]int
	rows   map[nk][]sample
	cands  []predict.Candidate
	vals   map[int]trace.Validation
	m0     float64
	target float64
	prices map[string]float64
	// bounded: beyond its measured local batches a placement's step takes
	// its physical upper bound (a search space the traces do not bound;
	// see useCandidates) instead of the nearest measured one.
	bounded bool
}

// useCandidates makes cs the search space: placements the traces measured,
// at batches with a validation run, any local batch.
func (w *world) useCandidates(cs []predict.Candidate) error {
	for _, c := range cs {
		if err := c.Validate(); err != nil {
			return err
		}
		if len(w.rows[nk{c.Type, c.Nodes, c.Workers}]) == 0 {
			return fmt.Errorf("%w: the traces measured no placement of %d workers on %d %s node(s)", ErrNoCandidates, c.Workers, c.Nodes, c.Type)
		}
		if _, ok := w.vals[c.Batch]; !ok {
			return fmt.Errorf("%w: no validation run at batch %d", ErrNoCandidates, c.Batch)
		}
	}
	w.cands, w.bounded = cs, true
	return nil
}

type nk struct {
	typ  string
	n, k int
}

type sample struct{ local, step, sync float64 }

// newWorld builds the candidates and the ground truth for types.
func newWorld(app *trace.App, types []string, cat *price.Catalog) (*world, error) {
	w := &world{
		app: app, types: types,
		gpus:   map[string]int{},
		rows:   map[nk][]sample{},
		vals:   map[int]trace.Validation{},
		m0:     float64(app.Validations[0].Batch),
		target: app.TargetProgress(),
		prices: map[string]float64{},
	}
	for _, v := range app.Validations {
		w.vals[v.Batch] = v
	}
	for _, typ := range types {
		mt, err := cat.Lookup(typ)
		if err != nil {
			return nil, fmt.Errorf("price type %s: %w", typ, err)
		}
		p, err := mt.Hourly(false)
		if err != nil {
			return nil, fmt.Errorf("price type %s: %w", typ, err)
		}
		w.prices[typ] = p
		g := 0
		for _, r := range app.Placements[typ] {
			for _, c := range r.Placement {
				g = max(g, int(c-'0'))
			}
		}
		if g == 0 {
			g = mt.GPUs
		}
		if g == 0 {
			return nil, fmt.Errorf("type %s: %w: GPUs per node unknown", typ, ErrNoCandidates)
		}
		w.gpus[typ] = g
		fromPlacement := map[nk]bool{}
		add := func(r trace.StepRow, placement bool) {
			key := nk{typ, r.Nodes, r.Replicas}
			if !r.Packed(g) {
				return
			}
			if r.Nodes > 1 && strings.Trim(r.Placement, fmt.Sprint(g)) != "" {
				return
			}
			if !placement && fromPlacement[key] {
				return
			}
			if placement {
				fromPlacement[key] = true
			}
			w.rows[key] = append(w.rows[key], sample{r.LocalBatch, r.StepTime, r.SyncTime})
		}
		for _, r := range app.Placements[typ] {
			add(r, true)
		}
		for _, r := range app.Scalability[typ] {
			add(r, false)
		}
	}
	for key, rs := range w.rows {
		w.rows[key] = dedupe(rs)
	}
	keys := make([]nk, 0, len(w.rows))
	for key := range w.rows {
		keys = append(keys, key)
	}
	order := map[string]int{}
	for i, t := range types {
		order[t] = i
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.typ != b.typ {
			return order[a.typ] < order[b.typ]
		}
		return a.k < b.k
	})
	for _, key := range keys {
		rs := w.rows[key]
		lo, hi := rs[0].local, rs[len(rs)-1].local
		for _, v := range app.Validations {
			l := float64(v.Batch) / float64(key.k)
			if v.Batch >= key.k && l >= lo*(1-1e-9) && l <= hi*(1+1e-9) {
				w.cands = append(w.cands, predict.Candidate{Type: key.typ, Nodes: key.n, Workers: key.k, Batch: v.Batch})
			}
		}
	}
	if len(w.cands) == 0 {
		return nil, fmt.Errorf("app %s types %v: %w", app.Name, types, ErrNoCandidates)
	}
	return w, nil
}

// dedupe sorts samples by local batch and averages equal local batches.
func dedupe(rs []sample) []sample {
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].local < rs[j].local })
	var out []sample
	for i := 0; i < len(rs); {
		j, s := i, sample{local: rs[i].local}
		for ; j < len(rs) && rs[j].local == rs[i].local; j++ {
			s.step += rs[j].step
			s.sync += rs[j].sync
		}
		n := float64(j - i)
		s.step /= n
		s.sync /= n
		out = append(out, s)
		i = j
	}
	return out
}

// stepTime is the measured step and sync time of c, linearly interpolated in
// local batch.
func (w *world) stepTime(c predict.Candidate) (step, sync float64) {
	rs := w.rows[nk{c.Type, c.Nodes, c.Workers}]
	l := c.Local()
	if len(rs) == 0 {
		return math.NaN(), math.NaN()
	}
	if l <= rs[0].local {
		return rs[0].step, rs[0].sync
	}
	if last := rs[len(rs)-1]; w.bounded && l > last.local {
		// No more time per sample than at the largest measured local
		// batch: the upper bound of perf.Bounds.
		f := l / last.local
		return last.step * f, last.sync
	}
	for i := 1; i < len(rs); i++ {
		if l <= rs[i].local {
			a, b := rs[i-1], rs[i]
			f := (l - a.local) / (b.local - a.local)
			return a.step + f*(b.step-a.step), a.sync + f*(b.sync-a.sync)
		}
	}
	last := rs[len(rs)-1]
	return last.step, last.sync
}

// segment returns, for batch b at progress p, the progress per step, the end
// of the current segment and the validation row that closes it.
func (w *world) segment(b int, p float64) (rate, end float64, row trace.ValidationRow) {
	v := w.vals[b]
	prevP, prevI := 0.0, 0.0
	for _, r := range v.Rows {
		if r.Progress > p {
			return (r.Progress - prevP) / (r.Iteration - prevI), r.Progress, r
		}
		prevP, prevI = r.Progress, r.Iteration
	}
	last := v.Rows[len(v.Rows)-1]
	return 0, last.Progress, last
}

// grad returns |G|² and tr Σ at progress p of the run at batch b. A row's
// statistics describe its segment (they match its progress per step), so they
// are placed at the segment's midpoint and interpolated geometrically between
// midpoints. From the first step to the first midpoint the trend between the
// first two midpoints is extended back (a real job's statistics move from its
// first step; holding them flat there would hand the policies a stable noise
// scale that no real job shows). After the last midpoint they are constant.
func (w *world) grad(b int, p float64) (sqr, vari float64) {
	rows := w.vals[b].Rows
	mids := make([]float64, len(rows))
	prev := 0.0
	for i, r := range rows {
		mids[i] = (prev + r.Progress) / 2
		prev = r.Progress
	}
	if p <= mids[0] {
		if len(rows) < 2 || !(mids[1] > mids[0]) {
			return rows[0].GradSqr, rows[0].GradVar
		}
		f := (math.Max(p, 0) - mids[0]) / (mids[1] - mids[0]) // in [-½·mids0/(mids1-mids0), 0]
		return geo(rows[0].GradSqr, rows[1].GradSqr, f), geo(rows[0].GradVar, rows[1].GradVar, f)
	}
	for i := 1; i < len(rows); i++ {
		if p <= mids[i] {
			f := (p - mids[i-1]) / (mids[i] - mids[i-1])
			return geo(rows[i-1].GradSqr, rows[i].GradSqr, f), geo(rows[i-1].GradVar, rows[i].GradVar, f)
		}
	}
	last := rows[len(rows)-1]
	return last.GradSqr, last.GradVar
}

// geo interpolates (or, for f < 0, extrapolates) geometrically between
// positive a and b (linearly if either is zero, floored at 0).
func geo(a, b, f float64) float64 {
	if a <= 0 || b <= 0 {
		return math.Max(a+f*(b-a), 0)
	}
	return math.Exp(math.Log(a) + f*(math.Log(b)-math.Log(a)))
}

// run advances a job in configuration c from progress p for at most maxSteps
// steps (or until the target), returning steps taken, seconds and progress
// gained. Steps are fractional at the very end.
func (w *world) run(c predict.Candidate, p, maxSteps float64) (steps, secs, gained float64) {
	st, _ := w.stepTime(c)
	pos := p
	for steps < maxSteps && pos < w.target {
		rate, end, _ := w.segment(c.Batch, pos)
		if rate <= 0 {
			break
		}
		goal := math.Min(end, w.target)
		need := (goal - pos) / rate
		if left := maxSteps - steps; need > left {
			steps += left
			pos += left * rate
			break
		}
		steps += need
		pos = goal // exactly the segment's end, so the next lookup moves on
	}
	return steps, steps * st, pos - p
}

// fixedOutcome is the whole job run in c from the start.
func (w *world) fixedOutcome(c predict.Candidate) (jct, cost float64) {
	_, secs, gained := w.run(c, 0, math.Inf(1))
	if gained < w.target*(1-1e-9) {
		return math.Inf(1), math.Inf(1)
	}
	return secs, secs * float64(c.Nodes) * w.prices[c.Type] / 3600
}

// Truth is an application's ground truth as the simulator replays it, for
// tools that replay the traces live and score what a live job did.
type Truth struct {
	// Target is the job's scale-invariant work and M0 the batch it is
	// counted in.
	Target, M0 float64
	w          *world
}

// LoadTruth loads the traces opts names (with its Candidates, their
// bounded step times).
func LoadTruth(opts Options) (*Truth, error) {
	w, err := load(&opts)
	if err != nil {
		return nil, err
	}
	return &Truth{Target: w.target, M0: w.m0, w: w}, nil
}

// StepTime is c's traced step time (NaN for a placement never measured).
func (t *Truth) StepTime(c predict.Candidate) float64 {
	st, _ := t.w.stepTime(c)
	return st
}
