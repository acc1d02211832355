// Package sim is the trace-driven simulator. It replays an application's
// measured traces (shared/traces) as a live job that emits the telemetry the
// python client would — step and sync times of the configuration it runs, and
// the gradient statistics of the current point of training — drives a policy
// with it, and scores the outcome against the oracle (the best fixed
// candidate, knowing every trace) and the median fixed candidate.
//
// Semantics (issue 3):
//   - Candidates: per machine type, worker counts K from packed placements
//     (one node: 1..GPUs per node; more nodes: full nodes, from placements
//     or scalability rows); global batch B from the validated batch sizes
//     with B/K inside the measured local-batch range of that (type, N, K).
//     Step time interpolates linearly in local batch.
//   - Progress: in segment i of validation-<B>.csv (the first row with
//     progress_i above the current progress) a step adds
//     (progress_i − progress_{i−1})/(iteration_i − iteration_{i−1}); the job is
//     done at the smallest final progress among the validation files.
//   - Gradient statistics: a validation row's grad_sqr and grad_var describe
//     its segment; the job emits them interpolated geometrically between
//     segment midpoints, from the first step (before the first midpoint the
//     trend of the first two is extended back: no flat plateau), as the
//     expected values of the python client's per-step norms (gns.Expected).
//   - A configuration change costs the relaunch penalty, billed at the new
//     configuration's nodes, with no progress; probe steps count as progress.
//   - Cost = nodes × $/h × hours (whole nodes), relaunches included.
package sim

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/observe"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/optimizer/price"
	"github.com/scavenger-ml/scavenger/optimizer/prior"
	"github.com/scavenger-ml/scavenger/optimizer/trace"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// Options configures one simulation (the flags of `scavctl sim`).
type Options struct {
	// TraceDir is the application's trace directory (e.g.
	// shared/traces/cifar10). Ignored when FS is set.
	TraceDir string
	// FS and App locate the traces inside a file system instead.
	FS  fs.FS
	App string
	// Types are the trace machine types to use (default aws, azure, dgx-ext).
	Types []string
	// Objective is the user's goal (whole-job deadline and budget).
	Objective objective.Objective
	// Policy names the policy (see policy.Names).
	Policy string
	// StatModel names the policy's statistical model (policy.StatAdaptDL,
	// the default, or policy.StatPaper).
	StatModel string
	// Start is TYPE:K:B; empty means the first type, its smallest K, the
	// smallest B.
	Start string
	// RelaunchPenalty is the cost of a configuration change (default 30 s).
	RelaunchPenalty time.Duration
	// Catalog prices the types (nil: price.Default()).
	Catalog *price.Catalog
	// ReportInterval is the simulated seconds between telemetry reports
	// when the policy asks for no particular step count (default 30 s).
	ReportInterval time.Duration
	// Noise, when positive, makes the telemetry noisy (not the simulated
	// job): each report's mean step and sync times and gradient norms are
	// multiplied by independent factors 1 + Noise·N(0,1) (floored at 0.05),
	// drawn from a generator seeded with Seed, so runs stay reproducible.
	Noise float64
	// Seed seeds the telemetry noise.
	Seed uint64
	// ReportSteps, when positive, is the steps of a report when the policy
	// names none, as a live job's observer counts them (10 there), instead
	// of ReportInterval's seconds.
	ReportSteps float64
	// Stepwise runs the job step by step and emits every step as its own
	// record with the gradient statistics at its own progress, as a live
	// worker sends them, instead of one record standing for a report's
	// steps (slower; for comparing the simulated and the live path).
	Stepwise bool
	// MoveLead is how far ahead, in the job's time, the daemon names the
	// step a move checkpoints at (its moveLeadTime: the job runs on at the
	// old configuration that long, at least two steps, before it
	// relaunches); default 300 ms, negative: none.
	MoveLead time.Duration
	// Candidates, when set, is the search space instead of the one the
	// traces measure (see world.useCandidates): every one must be a
	// placement the traces measured at some local batch, and a batch with
	// a validation run. Beyond the local batches measured, a step takes
	// its physical upper bound (perf.Bounds).
	Candidates []predict.Candidate
	// Tap, when set, is called with every step record the job emits and
	// the decision it led to (nil when no report was due).
	Tap func(rec telemetry.StepRecord, d *policy.Decision)
	// Store is the simulated model store (see Learn): the entries earlier
	// jobs left, the signature of a trace's job being its application's
	// name. The job starts from prior.For its signature over them. Policy
	// none with an empty store first runs a scavenger job on the same
	// traces and stores what it learnt, as a previous job with the same
	// signature would have.
	Store []prior.Entry
}

// DefaultTypes are the cloud machine types of the traces.
var DefaultTypes = []string{"aws", "azure", "dgx-ext"}

// Segment is one configuration the job ran in.
type Segment struct {
	Type    string  `json:"type"`
	Nodes   int     `json:"nodes"`
	Workers int     `json:"workers"`
	Batch   int     `json:"batch"`
	StartS  float64 `json:"start_s"`
	Steps   float64 `json:"steps"`
}

// Outcome is a fixed candidate's whole-job result.
type Outcome struct {
	Type    string  `json:"type"`
	Nodes   int     `json:"nodes"`
	Workers int     `json:"workers"`
	Batch   int     `json:"batch"`
	JCTS    float64 `json:"jct_s"`
	CostUSD float64 `json:"cost_usd"`
}

// FixedStats summarises every fixed candidate.
type FixedStats struct {
	MedianJCTS    float64 `json:"median_jct_s"`
	MedianCostUSD float64 `json:"median_cost_usd"`
	Count         int     `json:"count"`
}

// ErrorStats summarises relative step-time prediction errors in percent.
type ErrorStats struct {
	MedianPct float64 `json:"median_pct"`
	P90Pct    float64 `json:"p90_pct"`
	N         int     `json:"n"`
}

// Report is the result of one simulation (`scavctl sim -o json`).
type Report struct {
	App        string  `json:"app"`
	Policy     string  `json:"policy"`
	StatModel  string  `json:"stat_model,omitempty"`
	Objective  string  `json:"objective"`
	RelaunchS  float64 `json:"relaunch_penalty_s"`
	Candidates int     `json:"candidates"`

	JCTS       float64   `json:"jct_s"`
	CostUSD    float64   `json:"cost_usd"`
	Relaunches int       `json:"relaunches"`
	History    []Segment `json:"history"`

	// PredictedJCTS and PredictedCostUSD are the whole-job figures the
	// policy predicted at its last decision that set the configuration, or
	// that committed it (policy.Decision.Commit), elapsed and spent then
	// plus the predicted remainder; 0 when the policy never predicted.
	// DecisionS says when that decision was made.
	PredictedJCTS    float64 `json:"predicted_jct_s"`
	PredictedCostUSD float64 `json:"predicted_cost_usd"`
	DecisionS        float64 `json:"decision_s"`
	Reason           string  `json:"reason"`

	Oracle Outcome    `json:"oracle"`
	Fixed  FixedStats `json:"fixed"`
	// StepTimeError compares the policy's last step-time predictions with
	// the traces on the candidates the job never ran, of the types the
	// policy had fitted on their own measurements (FittedTypes); the
	// others are predicted by a prior, not a model.
	StepTimeError ErrorStats `json:"step_time_error"`
	FittedTypes   []string   `json:"fitted_types,omitempty"`
	// Bound is the least overhead any policy could have had in this run
	// (see bound), in the objective's terms: the job's time or cost.
	BoundJCTS    float64 `json:"bound_jct_s"`
	BoundCostUSD float64 `json:"bound_cost_usd"`

	// Front holds every fixed candidate's outcome (for plots).
	Front []Outcome `json:"-"`
	// Predictions are the policy's last predictions of every candidate
	// (for scavctl plan --policy).
	Predictions []predict.Prediction `json:"-"`
	// Probes counts the moves made to measure a configuration (decisions
	// in the probing phase); StartedAt is where the job started when its
	// prior's models moved it before its first step (Policy.Start).
	Probes    int      `json:"probes"`
	StartedAt *Segment `json:"started_at,omitempty"`
	// Learned is what the job left in the store (see Learn).
	Learned []prior.Entry `json:"-"`
}

func (o *Options) defaults() error {
	if len(o.Types) == 0 {
		o.Types = DefaultTypes
	}
	if o.RelaunchPenalty == 0 {
		o.RelaunchPenalty = 30 * time.Second
	}
	if o.RelaunchPenalty < 0 {
		return fmt.Errorf("%w: negative relaunch penalty", ErrBadOptions)
	}
	switch {
	case o.MoveLead == 0:
		o.MoveLead = 300 * time.Millisecond
	case o.MoveLead < 0:
		o.MoveLead = 0
	}
	if o.ReportInterval == 0 && o.ReportSteps == 0 {
		o.ReportInterval = 30 * time.Second
	}
	if o.ReportSteps == 0 {
		o.ReportSteps = 1
	}
	if o.Objective.Kind == "" {
		o.Objective.Kind = objective.Time
	}
	if o.Policy == "" {
		o.Policy = "adaptive"
	}
	if o.FS == nil {
		if o.TraceDir == "" {
			return fmt.Errorf("%w: no trace directory", ErrBadOptions)
		}
		abs, err := filepath.Abs(o.TraceDir)
		if err != nil {
			return fmt.Errorf("trace dir %s: %w", o.TraceDir, err)
		}
		o.FS, o.App = os.DirFS(filepath.Dir(abs)), filepath.Base(abs)
	}
	if o.Catalog == nil {
		c, err := price.Default()
		if err != nil {
			return err
		}
		o.Catalog = c
	}
	return nil
}

func load(opts *Options) (*world, error) {
	if err := opts.defaults(); err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	app, err := trace.LoadApp(opts.FS, opts.App, opts.Types)
	if err != nil {
		return nil, fmt.Errorf("simulate %s: %w", opts.App, err)
	}
	w, err := newWorld(app, opts.Types, opts.Catalog)
	if err != nil {
		return nil, fmt.Errorf("simulate %s: %w", opts.App, err)
	}
	if len(opts.Candidates) > 0 {
		if err := w.useCandidates(opts.Candidates); err != nil {
			return nil, fmt.Errorf("simulate %s: %w", opts.App, err)
		}
	}
	return w, nil
}

// Run simulates one job under opts.Policy and scores it.
func Run(ctx context.Context, opts Options) (*Report, error) {
	w, err := load(&opts)
	if err != nil {
		return nil, err
	}
	return runWorld(ctx, w, opts)
}

func runWorld(ctx context.Context, w *world, opts Options) (*Report, error) {
	start, err := w.start(opts.Start)
	if err != nil {
		return nil, fmt.Errorf("simulate %s: %w", w.app.Name, err)
	}
	spec := policy.Spec{
		Candidates: w.cands,
		Prices:     w.prices,
		M0:         w.m0,
		Target:     w.target,
		Objective:  opts.Objective,
		RelaunchS:  opts.RelaunchPenalty.Seconds(),
		StatModel:  opts.StatModel,
	}
	store := opts.Store
	if opts.Policy == "none" && len(store) == 0 {
		first := opts
		first.Policy = "scavenger"
		_, learned, err := w.learn(ctx, spec, start, first)
		if err != nil {
			return nil, fmt.Errorf("simulate %s prior job: %w", w.app.Name, err)
		}
		store = learned
	}
	if len(store) > 0 {
		spec.Prior = prior.For(w.app.Name, store)
	}
	pol, err := policy.New(opts.Policy, spec)
	if err != nil {
		return nil, fmt.Errorf("simulate %s: %w", w.app.Name, err)
	}
	rep, err := w.simulate(ctx, pol, start, opts)
	if err != nil {
		return nil, err
	}
	rep.Learned = prior.Entries(w.app.Name, pol.Learned(), nil)
	rep.StatModel = opts.StatModel
	if err := w.score(rep, opts.Objective); err != nil {
		return nil, err
	}
	rep.BoundJCTS, rep.BoundCostUSD = w.bound(start, opts, rep.Oracle)
	return rep, nil
}

// Learn simulates opts.Policy over opts' traces with opts.Store as its
// store, and returns its report and the store's entries after it: opts.Store
// with what the job learnt merged in (how `scavctl sim --store-from` fills
// the store).
func Learn(ctx context.Context, opts Options) (*Report, []prior.Entry, error) {
	rep, err := Run(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	return rep, MergeStore(opts.Store, rep.Learned), nil
}

// MergeStore merges newer entries into a store (prior.Merge for the same
// signature and type; the others added).
func MergeStore(store, newer []prior.Entry) []prior.Entry {
	out := append([]prior.Entry(nil), store...)
	for _, e := range newer {
		found := false
		for i, o := range out {
			if o.Signature == e.Signature && o.Type == e.Type {
				out[i], found = prior.Merge(o, e), true
			}
		}
		if !found {
			out = append(out, e)
		}
	}
	return out
}

// learn runs opts.Policy in w from start over spec and returns the
// entries it leaves (its signature is the application's name).
func (w *world) learn(ctx context.Context, spec policy.Spec, start predict.Candidate, opts Options) (*Report, []prior.Entry, error) {
	pol, err := policy.New(opts.Policy, spec)
	if err != nil {
		return nil, nil, err
	}
	rep, err := w.simulate(ctx, pol, start, opts)
	if err != nil {
		return nil, nil, err
	}
	return rep, prior.Entries(w.app.Name, pol.Learned(), nil), nil
}

// start parses TYPE:K:B or picks the default start.
func (w *world) start(s string) (predict.Candidate, error) {
	if s == "" {
		best := predict.Candidate{}
		for _, c := range w.cands {
			if c.Type != w.types[0] {
				continue
			}
			if best.Type == "" || c.Workers < best.Workers || (c.Workers == best.Workers && c.Batch < best.Batch) {
				best = c
			}
		}
		if best.Type == "" {
			return best, fmt.Errorf("%w: type %s has no candidates", ErrBadStart, w.types[0])
		}
		return best, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return predict.Candidate{}, fmt.Errorf("%w: %q is not TYPE:K:B", ErrBadStart, s)
	}
	k, err1 := strconv.Atoi(parts[1])
	b, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil {
		return predict.Candidate{}, fmt.Errorf("%w: %q is not TYPE:K:B", ErrBadStart, s)
	}
	for _, c := range w.cands {
		if c.Type == parts[0] && c.Workers == k && c.Batch == b {
			return c, nil
		}
	}
	return predict.Candidate{}, fmt.Errorf("%w: %s", ErrBadStart, s)
}

// simulate runs the job loop: the job runs in its configuration until the
// observer's next report is due, emits its steps as the step records a
// live job's rank 0 would (step and sync time, gradient norms at the
// current point of training), and the records go through the same
// observer and policy as a live job's (observe.Loop).
func (w *world) simulate(ctx context.Context, pol policy.Policy, start predict.Candidate, opts Options) (*Report, error) {
	rep := &Report{
		App: w.app.Name, Policy: pol.Name(), Objective: string(opts.Objective.Kind),
		RelaunchS: opts.RelaunchPenalty.Seconds(), Candidates: len(w.cands),
	}
	valid := map[predict.Candidate]bool{}
	for _, c := range w.cands {
		valid[c] = true
	}
	relaunch := opts.RelaunchPenalty.Seconds()
	var rng *rand.Rand
	if opts.Noise > 0 {
		rng = rand.New(rand.NewPCG(opts.Seed, 0x5ca7))
	}
	var (
		now, spent, progress float64
		step                 int64
		lastPreds            []predict.Prediction
		fitted               []string
		recorded             bool
	)
	if d, ok := pol.Start(start); ok && valid[d.Config] {
		start = d.Config
		rep.StartedAt = &Segment{Type: start.Type, Nodes: start.Nodes, Workers: start.Workers, Batch: start.Batch}
		ch := d.Predictions[d.Chosen]
		rep.PredictedJCTS, rep.PredictedCostUSD, rep.Reason, recorded = ch.TotalS, ch.TotalUSD, d.Reason, true
		lastPreds, fitted = d.Predictions, d.FittedTypes
	}
	cur, attempt := start, 1
	loop := observe.Loop{Pol: pol, Obs: observe.New(observe.Config{
		M0: w.m0, Spent: func(float64) (float64, bool) { return spent, true },
		ReportSteps: opts.ReportSteps, ReportSeconds: opts.ReportInterval.Seconds(),
	})}
	loop.Obs.Begin(attempt, cur)
	rep.History = append(rep.History, Segment{Type: cur.Type, Nodes: cur.Nodes, Workers: cur.Workers, Batch: cur.Batch})
	for iter := 0; progress < w.target*(1-1e-12); iter++ {
		if iter%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("simulate %s: %w", w.app.Name, err)
			}
		}
		if iter > 50_000_000 {
			return nil, fmt.Errorf("simulate %s: %w after %d reports", w.app.Name, ErrStuck, iter)
		}
		st, sync := w.stepTime(cur)
		chunk := math.Max(loop.Obs.StepsToReport(st), 1)
		if opts.Stepwise {
			chunk = 1
		}
		steps, secs, gained := w.run(cur, progress, chunk)
		if steps <= 0 {
			return nil, fmt.Errorf("simulate %s in %s at progress %g: %w", w.app.Name, cur, progress, ErrStuck)
		}
		now += secs
		spent += secs * float64(cur.Nodes) * w.prices[cur.Type] / 3600
		progress += gained
		if progress > w.target*(1-1e-12) {
			progress = w.target
		}
		rep.History[len(rep.History)-1].Steps += steps
		if progress >= w.target*(1-1e-12) {
			break
		}
		rec := w.record(cur, attempt, st, sync, progress)
		if rng != nil {
			noisy := func(x float64) float64 { return x * math.Max(1+opts.Noise*rng.NormFloat64(), 0.05) }
			rec.Seconds = noisy(rec.Seconds)
			*rec.SyncSeconds = math.Min(noisy(*rec.SyncSeconds), rec.Seconds)
			*rec.LocalSqr, *rec.AvgSqr = noisy(*rec.LocalSqr), noisy(*rec.AvgSqr)
		}
		step += int64(math.Ceil(steps))
		rec.Step, rec.Time = step, now
		d, _, ok, err := loop.Step(rec, steps)
		if err != nil {
			return nil, fmt.Errorf("simulate %s: policy %s: %w", w.app.Name, pol.Name(), err)
		}
		if opts.Tap != nil {
			var dp *policy.Decision
			if ok {
				dp = &d
			}
			opts.Tap(rec, dp)
		}
		if !ok {
			continue
		}
		if d.Predictions != nil {
			lastPreds, fitted = d.Predictions, d.FittedTypes
		}
		if d.Chosen >= 0 && d.Chosen < len(d.Predictions) && d.Predictions[d.Chosen].Candidate == d.Config && (!recorded || d.Config != cur || d.Commit) {
			ch := d.Predictions[d.Chosen]
			rep.PredictedJCTS, rep.PredictedCostUSD = now+ch.TotalS, spent+ch.TotalUSD
			rep.DecisionS, rep.Reason, recorded = now, d.Reason, true
		}
		if d.Config != cur {
			if !valid[d.Config] {
				return nil, fmt.Errorf("simulate %s: %w: %s", w.app.Name, ErrBadDecision, d.Config)
			}
			// The workers run on until the step the checkpoint request
			// names (the daemon's lead); the controller no longer counts
			// those steps, but the relaunch is measured from the last.
			if lead := moveLead(opts.MoveLead.Seconds(), st); lead > 0 {
				steps, secs, gained := w.run(cur, progress, lead)
				now += secs
				spent += secs * float64(cur.Nodes) * w.prices[cur.Type] / 3600
				progress = math.Min(progress+gained, w.target)
				rep.History[len(rep.History)-1].Steps += steps
				step += int64(math.Ceil(steps))
				led := w.record(cur, attempt, st, sync, progress)
				led.Step, led.Time = step, now
				loop.Obs.Note(led)
				if opts.Tap != nil {
					opts.Tap(led, nil)
				}
				if progress >= w.target*(1-1e-12) {
					break
				}
			}
			cur = d.Config
			if d.Phase == policy.PhaseProbing {
				rep.Probes++
			}
			attempt++
			loop.Obs.Begin(attempt, cur)
			rep.History = append(rep.History, Segment{Type: cur.Type, Nodes: cur.Nodes, Workers: cur.Workers, Batch: cur.Batch, StartS: now})
			now += relaunch
			spent += relaunch * float64(cur.Nodes) * w.prices[cur.Type] / 3600
			rep.Relaunches++
		}
	}
	rep.JCTS, rep.CostUSD = now, spent
	rep.StepTimeError, rep.FittedTypes = w.stepErrors(lastPreds, rep.History, fitted), fitted
	rep.Predictions = lastPreds
	return rep, nil
}

// record is rank 0's step record of a step of c at progress p, ended at
// no particular time yet: its step and sync time and the gradient norms a
// worker's local batch shows there (gns.Expected at the local batch the
// record names, so that its sample's scale matches them).
func (w *world) record(c predict.Candidate, attempt int, st, sync, p float64) telemetry.StepRecord {
	sqr, vari := w.grad(c.Batch, p)
	local := max(int(math.Round(c.Local())), 1)
	g := gns.Expected(sqr, vari, w.m0, float64(local), c.Workers)
	rec := telemetry.StepRecord{V: telemetry.SchemaVersion, Job: w.app.Name, Attempt: attempt, World: c.Workers,
		Seconds: st, Samples: local, LocalBatch: local, GlobalBatch: c.Batch, Count: int(g.Count), Biased: g.Biased}
	rec.SyncSeconds, rec.LocalSqr, rec.AvgSqr = &sync, &g.LocalSqr, &g.TotalSqr
	return rec
}

// moveLead is the steps a job at stepS seconds a step runs on after a move
// decision when the daemon leads by lead seconds (daemon/jobs: at least
// two steps, or lead seconds' worth and one more); 0 without a lead.
func moveLead(lead, stepS float64) float64 {
	if !(lead > 0) || !(stepS > 0) {
		return 0
	}
	return math.Max(2, math.Floor(lead/stepS)+1)
}

// stepErrors compares predicted step times with the traces on candidates
// the job never ran, of the fitted types.
func (w *world) stepErrors(preds []predict.Prediction, hist []Segment, fitted []string) ErrorStats {
	ran := map[predict.Candidate]bool{}
	for _, s := range hist {
		ran[predict.Candidate{Type: s.Type, Nodes: s.Nodes, Workers: s.Workers, Batch: s.Batch}] = true
	}
	fit := map[string]bool{}
	for _, t := range fitted {
		fit[t] = true
	}
	var errs []float64
	for _, p := range preds {
		if ran[p.Candidate] || !fit[p.Type] {
			continue
		}
		truth, _ := w.stepTime(p.Candidate)
		errs = append(errs, 100*math.Abs(p.StepTime-truth)/truth)
	}
	if len(errs) == 0 {
		return ErrorStats{}
	}
	sort.Float64s(errs)
	return ErrorStats{MedianPct: Quantile(errs, 0.5), P90Pct: Quantile(errs, 0.9), N: len(errs)}
}

// bound is the least time and cost any policy could have reached from
// start: it sees nothing before the first report (one report interval in
// start), and then either stays for good or pays at least one relaunch
// (billed at the oracle's nodes) and finishes the rest at the oracle's
// pace. The oracle itself cannot be beaten.
func (w *world) bound(start predict.Candidate, opts Options, oracle Outcome) (jct, cost float64) {
	stayS, stayUSD := w.fixedOutcome(start)
	st, _ := w.stepTime(start)
	perS := func(typ string, nodes int) float64 { return float64(nodes) * w.prices[typ] / 3600 }
	_, t1, p1 := w.run(start, 0, math.Max(opts.ReportInterval.Seconds()/st, 1))
	left := math.Max(1-p1/w.target, 0)
	r := opts.RelaunchPenalty.Seconds()
	moveS := t1 + r + left*oracle.JCTS
	moveUSD := t1*perS(start.Type, start.Nodes) + r*perS(oracle.Type, oracle.Nodes) + left*oracle.CostUSD
	return math.Max(math.Min(stayS, moveS), oracle.JCTS), math.Max(math.Min(stayUSD, moveUSD), oracle.CostUSD)
}

// Quantile is the q-quantile of sorted xs (not empty), interpolated
// linearly between order statistics.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 1 {
		return xs[0]
	}
	pos := q * float64(len(xs)-1)
	i := int(pos)
	if i >= len(xs)-1 {
		return xs[len(xs)-1]
	}
	f := pos - float64(i)
	return xs[i] + f*(xs[i+1]-xs[i])
}

// score fills the oracle and fixed-median figures.
func (w *world) score(rep *Report, o objective.Objective) error {
	preds := make([]predict.Prediction, 0, len(w.cands))
	var jcts, costs []float64
	for _, c := range w.cands {
		jct, cost := w.fixedOutcome(c)
		if math.IsInf(jct, 0) {
			continue
		}
		preds = append(preds, predict.Prediction{Candidate: c, TotalS: jct, TotalUSD: cost})
		jcts = append(jcts, jct)
		costs = append(costs, cost)
		rep.Front = append(rep.Front, Outcome{Type: c.Type, Nodes: c.Nodes, Workers: c.Workers, Batch: c.Batch, JCTS: jct, CostUSD: cost})
	}
	ch, err := objective.Choose(preds, o)
	if err != nil {
		return fmt.Errorf("score %s: oracle: %w", w.app.Name, err)
	}
	best := preds[ch.Index]
	rep.Oracle = Outcome{Type: best.Type, Nodes: best.Nodes, Workers: best.Workers, Batch: best.Batch, JCTS: best.TotalS, CostUSD: best.TotalUSD}
	sort.Float64s(jcts)
	sort.Float64s(costs)
	rep.Fixed = FixedStats{MedianJCTS: Quantile(jcts, 0.5), MedianCostUSD: Quantile(costs, 0.5), Count: len(jcts)}
	return nil
}
