// Package policy holds the search policies that turn a job's telemetry into
// decisions: fixed (never move), full (probe every candidate, then choose),
// scavenger, none (reuse stored step-time models for the same job
// signature), and adaptive.
//
// scavenger is the paper's partial search (Tyagi & Sharma: once the noise
// estimate is stable, probe the extreme configurations ~20 steps each, fit,
// choose, stop), made sensible across machine types. Probing the extremes
// of every type costs a relaunch each (9–12 per job with three types), so
// the extremes of (K, B) are probed on the start type only; the fitted
// shape, a function of (nodes, K, local batch), is transferred to each other
// type, whose candidates carry their own node counts from the catalog's GPUs
// per node, leaving one unknown speed factor; one probe per other type, at
// its best configuration under the shape, measures it. The search is skipped
// when its relaunches cannot pay (more than half the time left in the
// current configuration), and another type is probed only while its
// relaunch stays within a tenth of the best predicted remainder. Like the
// paper, it predicts with the current noise scale and decides once.
//
// adaptive is ours: a few probes chosen by a catalog prior and only when
// search can pay, then re-optimising at every report with a forecast of the
// noise scale's growth, across machine types, moving only when the predicted
// gain beats the relaunch by a margin; once the forecast is mature and its
// whole-job prediction has settled it commits the plan (Decision.Commit),
// so that the reported prediction is made with the data the forecast needs.
//
// Policies are deterministic state machines: Observe takes plain values and
// returns a decision with its reason and predictions. They read no clocks,
// do no I/O and start no goroutines.
//
// # Throughput-only jobs
//
// A job that sends no gradient statistics (an uninstrumented job, whose
// steps come from its output: every Observation.Grad is the zero
// gns.Sample, Count 0) is optimised for throughput alone. Until the first
// report with gradient statistics, every policy
//
//   - skips the noise update (a report with Grad.Count == 0 is not an error),
//   - does not wait for a noise estimate to stabilise (the warm-up gates of
//     full, scavenger, none and adaptive pass at once; probes still run
//     ProbeSteps each),
//   - predicts as if every sample were fully useful: the gain of a step at
//     batch B is B/M0 at every batch (statistical efficiency 1; predict
//     gets |G|² = 0 and tr Σ = 1, an infinite noise scale, and no noise
//     forecast), so goodput is samples/s over M0 and the objective picks the
//     best samples/s (per dollar for cost),
//   - and starts every Decision.Reason with ThroughputOnlyReason.
//
// The caller must count such a job's Observation.Progress the same way:
// samples processed over M0 (steps × B/M0). Once a report carries gradient
// statistics the job is no longer throughput-only and the noise gates and
// efficiency apply from then on.
package policy

import (
	"fmt"
	"math"
	"sort"

	"github.com/scavenger-ml/scavenger/optimizer/efficiency"
	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/perf"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// Spec describes the job and its search space.
type Spec struct {
	// Candidates is the search space.
	Candidates []predict.Candidate
	// Prices is the $/hour of one node by machine type.
	Prices map[string]float64
	// M0 is the base batch progress is counted in.
	M0 float64
	// Target is the job's total scale-invariant progress.
	Target float64
	// Objective is the user's goal; its deadline and budget are whole-job.
	Objective objective.Objective
	// RelaunchS is the seconds one configuration change costs.
	RelaunchS float64
	// ProbeSteps is the number of steps a probe runs (default 20).
	ProbeSteps float64
	// Margin is the fraction a move must gain over staying (adaptive;
	// default 0.05).
	Margin float64
}

func (s *Spec) validate() error {
	if len(s.Candidates) == 0 {
		return fmt.Errorf("%w: no candidates", ErrBadSpec)
	}
	if !(s.M0 > 0) || !(s.Target > 0) || s.RelaunchS < 0 {
		return fmt.Errorf("%w: M0 %g target %g relaunch %g", ErrBadSpec, s.M0, s.Target, s.RelaunchS)
	}
	for _, c := range s.Candidates {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrBadSpec, err)
		}
		if _, ok := s.Prices[c.Type]; !ok {
			return fmt.Errorf("%w: no price for type %s", ErrBadSpec, c.Type)
		}
	}
	if s.ProbeSteps == 0 {
		s.ProbeSteps = 20
	}
	if s.Margin == 0 {
		s.Margin = 0.05
	}
	return nil
}

// Observation is one telemetry report: what the job did since the last one.
type Observation struct {
	// ElapsedS and SpentUSD are the job's wall time and cost so far.
	ElapsedS, SpentUSD float64
	// Config is the configuration that ran.
	Config predict.Candidate
	// Steps is the number of steps in this report.
	Steps float64
	// StepTime and SyncTime are their mean seconds.
	StepTime, SyncTime float64
	// Grad is the gradient statistics of the latest step; the zero Sample
	// (Count 0) means none (an uninstrumented job; see the package
	// comment on throughput-only jobs).
	Grad gns.Sample
	// Progress is the job's scale-invariant progress so far.
	Progress float64
}

// ThroughputOnlyReason starts the Reason of every decision taken for a job
// that has sent no gradient statistics (see the package comment).
const ThroughputOnlyReason = "throughput only (no gradient statistics): "

// Decision is what a policy wants next.
type Decision struct {
	// Config is the configuration to run next (the current one to stay).
	Config predict.Candidate `json:"config"`
	// Reason says why, in words for people; code reads Phase.
	Reason string `json:"reason"`
	// Phase is where the policy is after this decision.
	Phase Phase `json:"phase"`
	// WaitSteps asks for the next report after this many steps (0: the
	// caller's default interval).
	WaitSteps float64 `json:"wait_steps,omitempty"`
	// Predictions are the forecasts behind a model-based choice (nil when
	// the decision did not evaluate candidates).
	Predictions []predict.Prediction `json:"-"`
	// Chosen indexes the chosen candidate in Predictions (-1 if none).
	Chosen int `json:"-"`
	// Commit marks a decision that re-evaluated every candidate and
	// confirms the configuration it returns as the job's plan, so that its
	// predictions are the ones to report even though the configuration
	// does not change (adaptive: once the noise forecast is mature).
	Commit bool `json:"commit,omitempty"`
}

// Phase is where a policy is in its search. The values are what job
// records and events carry.
type Phase string

// The phases of a policy.
const (
	// PhaseWarmup: waiting for a stable noise estimate before deciding.
	PhaseWarmup Phase = "warm-up"
	// PhaseProbing: measuring configurations to fit the model.
	PhaseProbing Phase = "probing"
	// PhaseOptimised: running at the configuration the policy chose (or
	// staying where it is because searching does not pay); a continuous
	// policy may still move from here as the noise scale grows.
	PhaseOptimised Phase = "optimised"
)

// Policy turns telemetry into decisions.
type Policy interface {
	// Name is the policy's name.
	Name() string
	// Observe takes one report and returns the next decision.
	Observe(Observation) (Decision, error)
}

// Names lists the policies New knows.
var Names = []string{"fixed", "full", "scavenger", "adaptive", "none"}

// New builds a policy by name. stored is used by "none" only.
func New(name string, spec Spec, stored map[string]predict.StepTimer) (Policy, error) {
	if err := spec.validate(); err != nil {
		return nil, fmt.Errorf("new policy %s: %w", name, err)
	}
	t := newTracker(spec)
	switch name {
	case "fixed":
		return &fixed{t: t}, nil
	case "full":
		return &search{t: t, name: "full", plan: allProbes}, nil
	case "scavenger":
		return &partial{t: t}, nil
	case "none":
		if len(stored) == 0 {
			return nil, fmt.Errorf("new policy none: %w", ErrNoStoredModel)
		}
		return &none{t: t, stored: stored}, nil
	case "adaptive":
		// A shorter memory than AdaptDL's 0.999 per M0-batch: the forecast
		// needs the current noise scale, not last epoch's.
		t.est.Decay = adaptiveDecay
		return &adaptive{t: t}, nil
	}
	return nil, fmt.Errorf("new policy %q: %w (have %v)", name, ErrUnknownPolicy, Names)
}

// measurement is the step-weighted mean telemetry of one configuration.
type measurement struct {
	steps, step, sync float64
}

// tracker is the state every policy shares: the noise estimate and the
// measured step times.
type tracker struct {
	spec    Spec
	est     gns.Estimator
	meas    map[predict.Candidate]*measurement
	phis    []float64
	last    Observation
	reports int
	steps   float64
	types   []string
	// forecast enables the noise-growth forecast in predictions, and
	// transfer fills types with one measured configuration from the
	// best-measured type's shape (adaptive only).
	forecast, transfer bool
	growth             []phiPoint
	// grads says whether any report has carried gradient statistics; a job
	// without them is throughput-only.
	grads bool
}

// maxGrowthExponent bounds the power-law exponent of the noise forecast.
const maxGrowthExponent = 3

type phiPoint struct{ progress, lnPhi float64 }

func newTracker(spec Spec) *tracker {
	seen := map[string]bool{}
	var types []string
	for _, c := range spec.Candidates {
		if !seen[c.Type] {
			seen[c.Type] = true
			types = append(types, c.Type)
		}
	}
	return &tracker{spec: spec, meas: map[predict.Candidate]*measurement{}, types: types}
}

func (t *tracker) observe(o Observation) error {
	if !(o.Steps > 0) || !(o.StepTime > 0) || o.SyncTime < 0 || math.IsInf(o.StepTime, 0) {
		return fmt.Errorf("observe %s: %w: %g steps of %g s", o.Config, ErrBadObservation, o.Steps, o.StepTime)
	}
	if o.Grad.Count != 0 {
		est, err := t.est.UpdateSteps(o.Grad, o.Steps)
		if err != nil {
			return fmt.Errorf("observe %s: %w", o.Config, err)
		}
		t.est, t.grads = est, true
		phi := t.est.NoiseScale(t.spec.M0)
		t.phis = append(t.phis, phi)
		if phi > 0 && !math.IsInf(phi, 0) {
			t.growth = append(t.growth, phiPoint{o.Progress, math.Log(phi)})
		}
	}
	m := t.meas[o.Config]
	if m == nil {
		m = &measurement{}
		t.meas[o.Config] = m
	}
	n := m.steps + o.Steps
	m.step = (m.step*m.steps + o.StepTime*o.Steps) / n
	m.sync = (m.sync*m.steps + math.Min(o.SyncTime, o.StepTime)*o.Steps) / n
	m.steps = n
	t.last = o
	t.reports++
	t.steps += o.Steps
	return nil
}

// throughputOnly reports whether no report has carried gradient statistics.
func (t *tracker) throughputOnly() bool { return !t.grads }

// warm reports whether the warm-up gate of the searching policies has
// passed: at once for a throughput-only job, otherwise once the noise
// estimate is stable or after warmMaxSteps steps.
func (t *tracker) warm() bool {
	return t.throughputOnly() || t.stable(stableMinSteps, stableTol) || t.steps >= warmMaxSteps
}

// warmReason says what the warm-up is waiting for.
func (t *tracker) warmReason() string {
	return fmt.Sprintf("waiting for the noise estimate to stabilise (φ = %.4g after %.0f steps)", t.phis[len(t.phis)-1], t.steps)
}

// gain is the scale-invariant progress of one step at scale (batch/M0):
// the AdaScale gain under the noise estimate, or scale itself for a
// throughput-only job (every sample fully useful).
func (t *tracker) gain(scale float64) float64 {
	if t.throughputOnly() {
		return scale
	}
	return t.est.Gain(scale)
}

// label marks the decision of a throughput-only job (see
// ThroughputOnlyReason); errors pass through.
func (t *tracker) label(d Decision, err error) (Decision, error) {
	if err == nil && t.throughputOnly() {
		d.Reason = ThroughputOnlyReason + d.Reason
	}
	return d, err
}

// stable reports whether the noise scale changed by less than tol over each
// of the last three reports with gradient statistics, after at least
// minSteps steps.
func (t *tracker) stable(minSteps, tol float64) bool {
	if t.steps < minSteps || len(t.phis) < 4 {
		return false
	}
	n := len(t.phis)
	for i := n - 3; i < n; i++ {
		a, b := t.phis[i-1], t.phis[i]
		if math.IsInf(a, 0) || math.IsInf(b, 0) || math.Abs(b-a) > tol*math.Abs(a) {
			return false
		}
	}
	return true
}

func (t *tracker) measured(c predict.Candidate) bool {
	m := t.meas[c]
	return m != nil && m.steps >= t.spec.ProbeSteps-1e-6
}

// points returns the measured points of one machine type.
func (t *tracker) points(typ string) []perf.Point {
	var pts []perf.Point
	for c, m := range t.meas {
		if c.Type == typ {
			pts = append(pts, perf.Point{Nodes: c.Nodes, Replicas: c.Workers, LocalBatch: c.Local(), StepTime: m.step, SyncTime: m.sync})
		}
	}
	sort.Slice(pts, func(i, j int) bool {
		a, b := pts[i], pts[j]
		if a.Replicas != b.Replicas {
			return a.Replicas < b.Replicas
		}
		if a.Nodes != b.Nodes {
			return a.Nodes < b.Nodes
		}
		return a.LocalBatch < b.LocalBatch
	})
	return pts
}

// measuredOver wraps a model so that measured configurations predict their
// measured step time.
type measuredOver struct {
	base predict.StepTimer
	at   map[[2]int]map[float64]float64
}

// StepTime implements predict.StepTimer.
func (m measuredOver) StepTime(nodes, replicas int, local float64) float64 {
	if v, ok := m.at[[2]int{nodes, replicas}][local]; ok {
		return v
	}
	return m.base.StepTime(nodes, replicas, local)
}

// fit fits one model per machine type that has measurements.
func (t *tracker) fit() (map[string]predict.StepTimer, map[string]*perf.Fitted, error) {
	models := map[string]predict.StepTimer{}
	fits := map[string]*perf.Fitted{}
	var ref *perf.Fitted
	for _, typ := range t.types {
		pts := t.points(typ)
		if len(pts) == 0 {
			continue
		}
		f, err := perf.Fit(pts)
		if err != nil {
			return nil, nil, fmt.Errorf("fit type %s: %w", typ, err)
		}
		fits[typ] = f
		models[typ] = t.overlay(typ, f)
		if ref == nil || f.Configs > ref.Configs {
			ref = f
		}
	}
	if t.transfer && ref != nil && ref.Configs >= 3 {
		for typ, f := range fits {
			if f.Configs >= 3 {
				continue
			}
			pts := t.points(typ)
			models[typ] = t.overlay(typ, perf.Scaled(ref.Model, pts))
		}
	}
	return models, fits, nil
}

func (t *tracker) overlay(typ string, base predict.StepTimer) predict.StepTimer {
	at := map[[2]int]map[float64]float64{}
	for c, m := range t.meas {
		if c.Type != typ {
			continue
		}
		k := [2]int{c.Nodes, c.Workers}
		if at[k] == nil {
			at[k] = map[float64]float64{}
		}
		at[k][c.Local()] = m.step
	}
	return measuredOver{base: base, at: at}
}

// predict forecasts every candidate whose type has a model.
func (t *tracker) predict(models map[string]predict.StepTimer) ([]predict.Prediction, error) {
	in := predict.Inputs{
		Models:    models,
		Prices:    t.spec.Prices,
		M0:        t.spec.M0,
		Sqr:       t.est.Sqr(),
		Var:       t.est.Var(),
		Remaining: math.Max(t.spec.Target-t.last.Progress, 0),
		Current:   t.last.Config,
		RelaunchS: t.spec.RelaunchS,
	}
	switch {
	case t.throughputOnly():
		// |G|² = 0 with tr Σ > 0 is an infinite noise scale: the gain is
		// the scale at every batch (efficiency 1), goodput is samples/s.
		in.Sqr, in.Var = 0, 1
	case t.forecast:
		in.NoiseIntegral = t.noiseIntegral()
	}
	return predict.All(t.spec.Candidates, in)
}

// noiseIntegral forecasts the noise ratio u = φ/M0 over the rest of the job
// with a power law in progress, u(p) = u_now·(p/p_now)^a, a fitted by least
// squares of ln φ on ln p (over the recent half of progress once there are
// eight reports) and clamped to [0, maxGrowthExponent], and returns
// ∫ dp/(1+u(p)) over the remaining work (0 without a usable fit). The traces'
// noise scales grow roughly as p^0.2 (bert) to p^2 (deepspeech2, ncf).
func (t *tracker) noiseIntegral() float64 {
	xs, ys := t.growthWindow()
	if len(xs) < 3 || xs[len(xs)-1] <= xs[0] {
		return 0
	}
	now := t.growth[len(t.growth)-1].progress
	_, a := perf.Line(xs, ys)
	if math.IsNaN(a) || a <= 0 {
		return 0
	}
	// Over less than a quadrupling of progress the fit says little: shrink
	// the exponent toward constant noise in proportion.
	a *= math.Min(1, (xs[len(xs)-1]-xs[0])/math.Log(4))
	a = math.Min(a, maxGrowthExponent)
	u0 := t.est.Var() / math.Max(t.est.Sqr(), 1e-300)
	return efficiency.ForecastIntegral(now, math.Max(t.spec.Target, now), u0, a)
}

// growthWindow returns ln progress and ln φ of the reports the noise
// forecast fits: all of them, or the recent half of progress once there are
// eight.
func (t *tracker) growthWindow() (xs, ys []float64) {
	if len(t.growth) < 3 {
		return nil, nil
	}
	from := 0.0
	if len(t.growth) >= 8 {
		from = t.growth[len(t.growth)-1].progress / 2
	}
	for _, g := range t.growth {
		if g.progress > 0 && g.progress >= from {
			xs = append(xs, math.Log(g.progress))
			ys = append(ys, g.lnPhi)
		}
	}
	return xs, ys
}

// forecastMature reports whether the noise forecast has data over at least
// a quadrupling of progress (below that, noiseIntegral shrinks the fitted
// growth toward none).
func (t *tracker) forecastMature() bool {
	if xs, _ := t.growthWindow(); len(xs) < 3 {
		return false
	}
	first := 0.0
	for _, g := range t.growth {
		if g.progress > 0 {
			first = g.progress
			break
		}
	}
	return first > 0 && t.growth[len(t.growth)-1].progress >= 4*first
}

// choose applies the objective with the deadline and budget left.
func (t *tracker) choose(preds []predict.Prediction) (objective.Choice, error) {
	o := t.spec.Objective
	if o.DeadlineS > 0 {
		o.DeadlineS = math.Max(o.DeadlineS-t.last.ElapsedS, 1e-9)
	}
	if o.BudgetUSD > 0 {
		o.BudgetUSD = math.Max(o.BudgetUSD-t.last.SpentUSD, 1e-9)
	}
	return objective.Choose(preds, o)
}

// stay keeps the current configuration with the search over (or not worth it).
func (t *tracker) stay(reason string) Decision {
	return Decision{Config: t.last.Config, Reason: reason, Phase: PhaseOptimised, Chosen: -1}
}

// warmingUp keeps the current configuration while the noise estimate settles.
func (t *tracker) warmingUp(reason string) Decision {
	d := t.stay(reason)
	d.Phase = PhaseWarmup
	return d
}

// probe moves to c to measure it.
func (t *tracker) probe(c predict.Candidate, reason string) Decision {
	return Decision{Config: c, Reason: reason, Phase: PhaseProbing, WaitSteps: t.spec.ProbeSteps, Chosen: -1}
}

// waitToMeasure asks for the rest of a probe's steps on the current config.
func (t *tracker) waitToMeasure(reason string) Decision {
	d := t.stay(reason)
	d.Phase = PhaseProbing
	have := 0.0
	if m := t.meas[t.last.Config]; m != nil {
		have = m.steps
	}
	d.WaitSteps = math.Max(t.spec.ProbeSteps-have, 1)
	return d
}

// decide fits, predicts and chooses.
func (t *tracker) decide(models map[string]predict.StepTimer) (Decision, error) {
	preds, err := t.predict(models)
	if err != nil {
		return Decision{}, err
	}
	ch, err := t.choose(preds)
	if err != nil {
		return Decision{}, err
	}
	return Decision{Config: preds[ch.Index].Candidate, Reason: ch.Reason, Phase: PhaseOptimised, Predictions: preds, Chosen: ch.Index}, nil
}

// fixed never moves.
type fixed struct{ t *tracker }

// Name implements Policy.
func (p *fixed) Name() string { return "fixed" }

// Observe implements Policy.
func (p *fixed) Observe(o Observation) (Decision, error) {
	if err := p.t.observe(o); err != nil {
		return Decision{}, err
	}
	return p.t.label(p.t.stay("fixed configuration"), nil)
}

// ModelSource is implemented by policies that fit step-time models, so that
// a later job with the same signature can reuse them (the none policy).
type ModelSource interface {
	// Models returns the fitted step-time model per machine type.
	Models() map[string]predict.StepTimer
}

// Models implements ModelSource.
func (p *search) Models() map[string]predict.StepTimer { return p.t.baseModels() }

// Models implements ModelSource.
func (p *adaptive) Models() map[string]predict.StepTimer { return p.t.baseModels() }

// baseModels fits every type with measurements, ignoring errors of single
// types (they are simply left out).
func (t *tracker) baseModels() map[string]predict.StepTimer {
	out := map[string]predict.StepTimer{}
	for _, typ := range t.types {
		if pts := t.points(typ); len(pts) > 0 {
			if f, err := perf.Fit(pts); err == nil {
				out[typ] = f
			}
		}
	}
	return out
}
