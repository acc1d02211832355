// Package policy holds the search policies that turn a job's telemetry into
// decisions: fixed (never move), full (probe every candidate, then choose),
// scavenger, none (reuse stored step-time models for the same job
// signature), and adaptive.
//
// What every searching policy shares (tracker, models.go, explore.go):
//
//   - It decides on the noise the job will see, not the noise it sees: the
//     noise scale's growth is forecast as a power law in progress over the
//     remaining work. A forecast is mature once the progress it has seen
//     spans as many orders of magnitude as the extrapolation it makes (see
//     forecastMature); a decision taken before that says so
//     (Decision.Provisional) and is revisited.
//   - Every prediction carries a 90 % interval (predict.Prediction.StepLo,
//     StepHi): the cross-validated error of a type's own fitted model where
//     its measurements identify it, the physical bounds (perfect scaling up
//     to no scaling) where they do not, and a price prior for types never
//     measured. Fits are guarded (perf.Guard): no more free parameters than
//     measurements.
//   - Probing is priced in the objective's units (seconds for time, dollars
//     for cost with every node billed and the probe's own steps included),
//     and the next probe is the one whose expected improvement over the
//     incumbent (value of information × chance of winning) most exceeds its
//     cost; probing stops when none pays, i.e. when no candidate's interval
//     reaches far enough below the incumbent. Each type's probes are chosen
//     for identifiability first (its design: one replica, a full node at the
//     smallest and largest batch, the largest placement).
//   - The relaunch cost is the one measured on this job once it has moved
//     (Observation.RelaunchS), the Spec's prior before.
//
// scavenger is the paper's partial search (Tyagi & Sharma: once the noise
// estimate is reliable, probe, fit, choose, stop), generalised across
// machine types and made honest: its one decision is provisional until the
// noise forecast is mature, and then revisited once. With Spec.StatModel
// "paper" it also uses the paper's statistical model (γ/K from the two
// cold-start probes at the smallest K, e = e* + θ·γ/K) instead of AdaptDL's
// gain; the bench compares the two.
//
// adaptive is ours: the same probes, then re-optimising at every report with
// the noise forecast, moving only when the predicted gain beats the relaunch
// by a margin; once the forecast is mature and its whole-job prediction has
// settled it commits the plan (Decision.Commit).
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

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/perf"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/optimizer/prior"
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
	// MinimumBillS is, by machine type, the fewest seconds a machine is
	// billed once bought (a provider's minimum; none: billed as used). A
	// probe that buys machines and may leave them again pays it.
	MinimumBillS map[string]float64
	// RelaunchS is the seconds one configuration change costs.
	RelaunchS float64
	// ProbeSteps is the number of steps a probe runs (default 20).
	ProbeSteps float64
	// Margin is the fraction a move must gain over staying (adaptive, and
	// scavenger's revisit; default 0.05).
	Margin float64
	// StatModel names the statistical-efficiency model: "adaptdl" (the
	// default: AdaScale gain from |G|² and tr Σ with the noise forecast) or
	// "paper" (Scavenger's γ/K and e = e* + θ·γ/K from the two cold-start
	// probes; see paper.go).
	StatModel string
	// Prior is what earlier jobs teach this one (nil: nothing; see
	// learn.go): the same signature's measurements, noise and relaunch
	// cost, and the speed ratios between machine types other signatures
	// measured.
	Prior *prior.Prior
}

// The statistical models Spec.StatModel names.
const (
	StatAdaptDL = "adaptdl"
	StatPaper   = "paper"
)

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
	switch s.StatModel {
	case "":
		s.StatModel = StatAdaptDL
	case StatAdaptDL, StatPaper:
	default:
		return fmt.Errorf("%w: statistical model %q (have %s, %s)", ErrBadSpec, s.StatModel, StatAdaptDL, StatPaper)
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
	// RelaunchS is the measured seconds of the relaunch that started this
	// configuration (from the last step of the previous attempt to the
	// first of this one), on the first report after it; 0 when none was
	// measured. Once measured it replaces Spec.RelaunchS.
	RelaunchS float64
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
	// does not change (once the noise forecast is mature).
	Commit bool `json:"commit,omitempty"`
	// Provisional marks a model-based decision taken before the noise
	// forecast was mature: the policy will revisit it.
	Provisional bool `json:"provisional,omitempty"`
	// FittedTypes are the machine types predicted by a model fitted on
	// their own measurements (the others by a transferred shape or a
	// prior).
	FittedTypes []string `json:"-"`
	// Probe is, for a probe valued against the incumbent, what measuring
	// Config is expected to gain (nil for other decisions).
	Probe *ProbeValue `json:"probe,omitempty"`
}

// ProbeValue is what a probe is expected to gain, in the objective's Units
// ("s", "$", or "s·$" for the knee): Gain, the expected improvement over
// the incumbent of the best candidate it informs, whose chance to beat the
// incumbent is Chance; Cost, what the probe costs beyond its progress (its
// steps against the incumbent's, and a relaunch back if it loses). Design
// marks a probe of its type's identifiability design.
type ProbeValue struct {
	Gain   float64 `json:"gain"`
	Cost   float64 `json:"cost"`
	Chance float64 `json:"chance"`
	Units  string  `json:"units"`
	Design bool    `json:"design,omitempty"`
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
	// Rechoose re-decides over a changed search space or prices (spec)
	// from the policy's models and the job's state, keeping what it has
	// learnt; forced says that the job must relaunch whatever is chosen
	// (see rechoose.go).
	Rechoose(spec Spec, forced bool) (Decision, error)
	// Start is where a job that would start at from starts instead, when
	// its prior's models say so before it has run a step (ok false: at
	// from; see learn.go).
	Start(from predict.Candidate) (d Decision, ok bool)
	// Learned is what the job taught about its signature so far, for a
	// later job's prior.
	Learned() prior.Learned
}

// Names lists the policies New knows.
var Names = []string{"fixed", "full", "scavenger", "adaptive", "none"}

// Check reports whether New could build the policy name over spec once
// the prior "none" needs is there (a job's request is checked before its
// prior is read).
func Check(name string, spec Spec) error {
	if spec.Prior == nil && name == "none" {
		name = "scavenger"
	}
	_, err := New(name, spec)
	return err
}

// New builds a policy by name. "none" needs a prior with measurements
// (Spec.Prior).
func New(name string, spec Spec) (Policy, error) {
	if err := spec.validate(); err != nil {
		return nil, fmt.Errorf("new policy %s: %w", name, err)
	}
	t := newTracker(spec)
	// A shorter memory than AdaptDL's 0.999 per M0-batch: the forecast
	// needs the current noise scale, not last epoch's.
	t.est.Decay = forecastDecay
	switch name {
	case "fixed":
		return &fixed{t: t}, nil
	case "full":
		return &search{t: t, name: "full", plan: allProbes, once: oneShot{probe: true}}, nil
	case "scavenger":
		return &partial{t: t, once: oneShot{probe: true}}, nil
	case "none":
		if spec.Prior == nil || len(spec.Prior.Points) == 0 {
			return nil, fmt.Errorf("new policy none: %w", ErrNoStoredModel)
		}
		return &none{t: t}, nil
	case "adaptive":
		return &adaptive{t: t}, nil
	}
	return nil, fmt.Errorf("new policy %q: %w (have %v)", name, ErrUnknownPolicy, Names)
}

// measurement is the step-weighted mean telemetry of one configuration,
// with the progress it made, its mean normalised noise γ/K, and its
// reports' sums for the drift (drift.go).
type measurement struct {
	steps, step, sync  float64
	progress           float64
	gammaSteps, gammaW float64
	drift              driftSums
}

// tracker is the state every policy shares: the noise estimate and its
// growth, the measured step times, the measured relaunches.
type tracker struct {
	spec    Spec
	est     gns.Estimator
	meas    map[predict.Candidate]*measurement
	last    Observation
	reports int
	steps   float64
	types   []string
	growth  []phiPoint
	// grads says whether any report has carried gradient statistics; a job
	// without them is throughput-only.
	grads bool
	// relaunches are the measured relaunch costs (s).
	relaunches []float64
	// start is the configuration of the first report.
	start predict.Candidate
	// designs caches each type's identifiability design (designProbes);
	// buf is choose's scratch space.
	designs map[string][]predict.Candidate
	buf     []predict.Prediction
	// stored is what the prior knows (learn.go).
	stored storedKnowledge
}

// startType is the machine type the job started on.
func (t *tracker) startType() string { return t.start.Type }

// Warm-up: the noise estimate is reliable once warmReports reports carry
// gradient statistics and the standard error of ln φ at the latest one,
// from the scatter of the reports the forecast fits around their trend, is
// below stableTol — a 10 % error in φ moves the statistical efficiency by
// at most 10 %, no more than the step-time model's error it is combined
// with; decisions start after warmMaxSteps steps regardless (the paper
// waits 2K–10K iterations).
const (
	warmReports  = 4
	stableTol    = 0.1
	warmMaxSteps = 2000
)

type phiPoint struct{ progress, lnPhi float64 }

func newTracker(spec Spec) *tracker {
	return &tracker{spec: spec, meas: map[predict.Candidate]*measurement{}, types: typesOf(spec.Candidates), stored: newStored(spec)}
}

func (t *tracker) observe(o Observation) error {
	if !(o.Steps > 0) || !(o.StepTime > 0) || o.SyncTime < 0 || math.IsInf(o.StepTime, 0) {
		return fmt.Errorf("observe %s: %w: %g steps of %g s", o.Config, ErrBadObservation, o.Steps, o.StepTime)
	}
	m := t.meas[o.Config]
	if m == nil {
		m = &measurement{}
		t.meas[o.Config] = m
	}
	if t.reports == 0 {
		t.start = o.Config
	}
	if o.Grad.Count != 0 {
		est, err := t.est.UpdateSteps(o.Grad, o.Steps)
		if err != nil {
			return fmt.Errorf("observe %s: %w", o.Config, err)
		}
		t.est, t.grads = est, true
		phi := t.est.NoiseScale(t.spec.M0)
		if phi > 0 && !math.IsInf(phi, 0) && o.Progress > 0 {
			t.growth = append(t.growth, phiPoint{o.Progress, math.Log(phi)})
		}
		if g, err := gns.NormalizedNoise(o.Grad.LocalSqr, o.Grad.TotalSqr, int(math.Round(o.Grad.Count))); err == nil {
			m.gammaSteps += o.Steps
			m.gammaW += g * o.Steps
		}
	}
	if o.RelaunchS > 0 && !math.IsInf(o.RelaunchS, 0) {
		t.relaunches = append(t.relaunches, o.RelaunchS)
	}
	n := m.steps + o.Steps
	m.step = (m.step*m.steps + o.StepTime*o.Steps) / n
	m.sync = (m.sync*m.steps + math.Min(o.SyncTime, o.StepTime)*o.Steps) / n
	m.steps = n
	m.progress += math.Max(o.Progress-t.last.Progress, 0)
	m.drift.add((t.last.Progress+o.Progress)/2, math.Log(o.StepTime))
	t.last = o
	t.reports++
	t.steps += o.Steps
	return nil
}

// relaunchS is the cost of one relaunch in seconds: the mean of those
// measured on this job, or before the first the one earlier jobs of its
// signature measured, or the Spec's.
func (t *tracker) relaunchS() float64 {
	if len(t.relaunches) == 0 {
		if p := t.spec.Prior; p != nil && p.RelaunchS > 0 {
			return p.RelaunchS
		}
		return t.spec.RelaunchS
	}
	var s float64
	for _, r := range t.relaunches {
		s += r
	}
	return s / float64(len(t.relaunches))
}

// throughputOnly reports whether no report has carried gradient
// statistics, and no earlier job of the signature measured its noise.
func (t *tracker) throughputOnly() bool { return !t.grads && len(t.stored.growth) == 0 }

// warm reports whether the warm-up gate of the searching policies has
// passed: at once for a throughput-only job or one whose signature's noise
// earlier jobs measured, otherwise once the noise estimate is reliable
// (see reliable) or after warmMaxSteps steps.
func (t *tracker) warm() bool {
	return t.throughputOnly() || len(t.stored.growth) > 0 || t.reliable() || t.steps >= warmMaxSteps
}

// warmReason says what the warm-up is waiting for.
func (t *tracker) warmReason() string {
	phi := math.NaN()
	if n := len(t.growth); n > 0 {
		phi = math.Exp(t.growth[n-1].lnPhi)
	}
	return fmt.Sprintf("waiting for a reliable noise estimate (φ = %.4g after %.0f steps, %d reports)", phi, t.steps, len(t.growth))
}

// reliable reports whether the noise estimate can be decided on: at least
// warmReports reports with gradient statistics, and a standard error of ln φ
// at the latest report below stableTol, from the scatter of the reports the
// noise forecast fits (growthWindow) around their linear trend in ln
// progress. The trend is what the forecast is for; only the scatter around
// it makes an estimate unreliable. A flat signal passes only after
// warmReports reports (it has no scatter); a noisy one waits until enough
// reports average it out.
func (t *tracker) reliable() bool {
	if len(t.growth) < warmReports {
		return false
	}
	xs, ys := t.growthWindow()
	if len(xs) < 3 {
		return false
	}
	a, b := perf.Line(xs, ys)
	var xm, sxx, ssr float64
	for _, x := range xs {
		xm += x / float64(len(xs))
	}
	for i, x := range xs {
		sxx += (x - xm) * (x - xm)
		r := ys[i] - a - b*x
		ssr += r * r
	}
	k := float64(len(xs))
	s2 := ssr / (k - 2)
	last := xs[len(xs)-1] - xm
	se2 := s2 / k
	if sxx > 0 {
		se2 += s2 * last * last / sxx
	}
	return math.Sqrt(se2) <= stableTol
}

// label marks the decision of a throughput-only job (see
// ThroughputOnlyReason); errors pass through.
func (t *tracker) label(d Decision, err error) (Decision, error) {
	if err == nil && t.throughputOnly() {
		d.Reason = ThroughputOnlyReason + d.Reason
	}
	return d, err
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
			step, sync := t.stepNow(m)
			pts = append(pts, perf.Point{Nodes: c.Nodes, Replicas: c.Workers, LocalBatch: c.Local(), StepTime: step, SyncTime: sync})
		}
	}
	sort.Slice(pts, func(i, j int) bool {
		a, b := pts[i], pts[j]
		return placementLess(a.Replicas, a.Nodes, a.LocalBatch, b.Replicas, b.Nodes, b.LocalBatch)
	})
	return pts
}

// placementLess orders configurations by replicas, then nodes, then local
// batch.
func placementLess(ra, na int, la float64, rb, nb int, lb float64) bool {
	if ra != rb {
		return ra < rb
	}
	if na != nb {
		return na < nb
	}
	return la < lb
}

// predict forecasts every candidate whose type has a model, with the
// noise forecast (or the paper's statistics) over the remaining work.
func (t *tracker) predict(models map[string]predict.StepTimer) ([]predict.Prediction, error) {
	return t.predictAt(models, t.last.Config)
}

// predictAt is predict with cur as the configuration the job runs in (the
// zero Candidate: none, every candidate pays a relaunch).
func (t *tracker) predictAt(models map[string]predict.StepTimer, cur predict.Candidate) ([]predict.Prediction, error) {
	sqr, vari := t.noiseNow()
	in := predict.Inputs{
		Models:    models,
		Prices:    t.spec.Prices,
		M0:        t.spec.M0,
		Sqr:       sqr,
		Var:       vari,
		Remaining: math.Max(t.spec.Target-t.last.Progress, 0),
		Current:   cur,
		RelaunchS: t.relaunchS(),
	}
	switch {
	case t.throughputOnly():
		// |G|² = 0 with tr Σ > 0 is an infinite noise scale: the gain is
		// the scale at every batch (efficiency 1), goodput is samples/s.
		in.Sqr, in.Var = 0, 1
	case t.spec.StatModel == StatPaper:
		if st, ok := t.paperStats(); ok {
			in.Stats = st
		} else {
			in.NoiseIntegral = t.noiseIntegral()
		}
	default:
		in.NoiseIntegral = t.noiseIntegral()
	}
	return predict.All(t.spec.Candidates, in)
}

// choose applies the objective with the deadline and budget left.
// It compares the pessimistic end of each prediction's 90 % interval (see
// predict.Prediction.Pessimistic), not the point the prediction reports: a
// configuration is chosen on a model only where even the model's upper
// bound wins; a measured configuration's interval is its measurement.
// Where the model's optimism might pay, probing it is tracker.nextProbe's
// call, priced against what it could gain.
func (t *tracker) choose(preds []predict.Prediction) (objective.Choice, error) {
	o := t.spec.Objective
	if o.DeadlineS > 0 {
		o.DeadlineS = math.Max(o.DeadlineS-t.last.ElapsedS, 1e-9)
	}
	if o.BudgetUSD > 0 {
		o.BudgetUSD = math.Max(o.BudgetUSD-t.last.SpentUSD, 1e-9)
	}
	if cap(t.buf) < len(preds) {
		t.buf = make([]predict.Prediction, len(preds))
	}
	pes := t.buf[:len(preds)]
	for i, p := range preds {
		pes[i] = p.Pessimistic()
	}
	return objective.Choose(pes, o)
}

// stay keeps the current configuration with the search over (or not worth it).
func (t *tracker) stay(reason string) Decision {
	return Decision{Config: t.last.Config, Reason: reason, Phase: PhaseOptimised, Chosen: -1}
}

// warmingUp keeps the current configuration while the noise estimate
// settles, asking for reports every ProbeSteps steps so that the estimate is
// judged on as many reports as possible.
func (t *tracker) warmingUp(reason string) Decision {
	d := t.stay(reason)
	d.Phase = PhaseWarmup
	d.WaitSteps = t.spec.ProbeSteps
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

// decide predicts every candidate with models and chooses; a decision
// taken before the noise forecast is mature is marked Provisional.
func (t *tracker) decide(ms typeModels) (Decision, error) {
	return t.decideAt(ms, t.last.Config)
}

// decideAt is decide with cur as the configuration the job runs in (see
// predictAt).
func (t *tracker) decideAt(ms typeModels, cur predict.Candidate) (Decision, error) {
	preds, err := t.predictAt(ms.models, cur)
	if err != nil {
		return Decision{}, err
	}
	ch, err := t.choose(preds)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Config: preds[ch.Index].Candidate, Reason: ch.Reason, Phase: PhaseOptimised, Predictions: preds, Chosen: ch.Index, FittedTypes: ms.fitted}
	if !t.forecastMature() {
		d.Provisional = true
		d.Reason += " (provisional: the noise forecast is not mature)"
	}
	return d, nil
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
