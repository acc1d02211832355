// Package predict turns models into predictions for candidate
// configurations (machine type, nodes, workers K, global batch B): step time,
// gain and goodput, remaining time and cost, and the cost of getting there
// (one relaunch). Remaining time is remaining scale-invariant work divided by
// goodput (AdaptDL/Pollux); cost bills whole nodes at the type's hourly price
// (Scavenger's C = T·machines·p). All functions are pure.
package predict

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/scavenger-ml/scavenger/optimizer/efficiency"
)

// Candidate is one configuration a job could run in.
type Candidate struct {
	// Type is the machine type (a catalog name or trace suffix).
	Type string `json:"type"`
	// Nodes is the number of machines billed.
	Nodes int `json:"nodes"`
	// Workers is the number of data-parallel replicas K.
	Workers int `json:"workers"`
	// Batch is the global batch B.
	Batch int `json:"batch"`
}

// Local returns the per-worker batch B/K.
func (c Candidate) Local() float64 { return float64(c.Batch) / float64(c.Workers) }

// String formats the candidate as type:N:K:B.
func (c Candidate) String() string {
	return fmt.Sprintf("%s:%d:%d:%d", c.Type, c.Nodes, c.Workers, c.Batch)
}

// Validate checks that the candidate is possible.
func (c Candidate) Validate() error {
	if c.Type == "" || c.Nodes < 1 || c.Workers < c.Nodes || c.Batch < c.Workers {
		return fmt.Errorf("%w: %s", ErrBadCandidate, c)
	}
	return nil
}

// StepTimer predicts the seconds of one step (perf.Model satisfies it).
type StepTimer interface {
	StepTime(nodes, replicas int, local float64) float64
}

// Ranged is a StepTimer that knows how sure it is: the 90 % interval of the
// step time and the point prediction inside it (perf.Fitted satisfies it).
// Predictions of models that are not Ranged have a zero-width interval.
type Ranged interface {
	StepTimer
	Interval(nodes, replicas int, local float64) (lo, pt, hi float64)
}

// Statistics turns remaining scale-invariant work into optimizer steps at a
// global batch: a statistical-efficiency model other than the AdaScale gain
// (e.g. Scavenger's epochs from the normalised noise).
type Statistics interface {
	Steps(remaining float64, batch int) float64
}

// Inputs is everything a prediction needs besides the candidate.
type Inputs struct {
	// Models predicts step time per machine type.
	Models map[string]StepTimer
	// Prices is the $/hour of one node per machine type.
	Prices map[string]float64
	// M0 is the base batch that progress is counted in.
	M0 float64
	// Sqr and Var are the current |G|² and tr Σ at batch M0.
	Sqr, Var float64
	// Remaining is the scale-invariant work left.
	Remaining float64
	// NoiseIntegral, when positive, is ∫ dp/(1+u(p)) over the remaining
	// progress under a forecast of the noise ratio u = φ/M0 (see
	// efficiency.ForecastIntegral); steps at scale s are then
	// R/s + (1−1/s)·NoiseIntegral. 0 keeps the current noise.
	NoiseIntegral float64
	// Current is the configuration the job runs in now; a different
	// candidate pays one relaunch.
	Current Candidate
	// RelaunchS is the seconds of one relaunch (no progress, billed).
	RelaunchS float64
	// Stats, when set, replaces the AdaScale gain (Sqr, Var,
	// NoiseIntegral) in turning the remaining work into steps.
	Stats Statistics
}

// Prediction is the forecast for one candidate.
type Prediction struct {
	Candidate
	// StepTime is the predicted seconds of one step.
	StepTime float64 `json:"step_time_s"`
	// Gain is the scale-invariant progress of one step.
	Gain float64 `json:"gain"`
	// Goodput is progress per second.
	Goodput float64 `json:"goodput"`
	// RemainingS and RemainingUSD are the time and cost to finish in this
	// configuration, not counting the switch.
	RemainingS   float64 `json:"remaining_s"`
	RemainingUSD float64 `json:"remaining_usd"`
	// SwitchS and SwitchUSD are the cost of getting there (0 if current).
	SwitchS   float64 `json:"switch_s"`
	SwitchUSD float64 `json:"switch_usd"`
	// TotalS and TotalUSD add the switch to the remaining figures.
	TotalS   float64 `json:"total_s"`
	TotalUSD float64 `json:"total_usd"`
	// StepLo and StepHi bound the step time (the model's 90 % interval;
	// equal to StepTime for a model that gives none); TotalSLo..TotalUSDHi
	// are the totals at those bounds.
	StepLo     float64 `json:"step_lo_s"`
	StepHi     float64 `json:"step_hi_s"`
	TotalSLo   float64 `json:"total_lo_s"`
	TotalSHi   float64 `json:"total_hi_s"`
	TotalUSDLo float64 `json:"total_lo_usd"`
	TotalUSDHi float64 `json:"total_hi_usd"`
	// Flags mark a prediction not to be read as a fact (see Flag).
	Flags Flag `json:"flags,omitempty"`
}

// Flag marks what is doubtful about a prediction.
type Flag uint8

// The flags.
const (
	// FlagLowConfidence: the step time's 90 % interval spans more than
	// LowConfidenceRatio (the model is not validated there).
	FlagLowConfidence Flag = 1 << iota
	// FlagNonMonotone: against its neighbours on the same placement, the
	// predicted step time falls as the local batch grows, or the time per
	// sample rises (what no GPU does; see perf.Bounds).
	FlagNonMonotone
)

// LowConfidenceRatio is the width (hi/lo) of a step-time interval beyond
// which a prediction is flagged low-confidence: ±25 % around the point.
const LowConfidenceRatio = 1.25 * 1.25

// String lists the flags in words ("" for none).
func (f Flag) String() string {
	var out []string
	if f&FlagLowConfidence != 0 {
		out = append(out, "low-confidence")
	}
	if f&FlagNonMonotone != 0 {
		out = append(out, "non-monotone")
	}
	return strings.Join(out, ",")
}

// Words lists the flags in words.
func (f Flag) Words() []string {
	if f == 0 {
		return nil
	}
	return strings.Split(f.String(), ",")
}

// Predict forecasts one candidate.
func Predict(c Candidate, in Inputs) (Prediction, error) {
	if err := c.Validate(); err != nil {
		return Prediction{}, fmt.Errorf("predict %s: %w", c, err)
	}
	if !(in.M0 > 0) || in.Remaining < 0 || math.IsNaN(in.Remaining) || in.RelaunchS < 0 {
		return Prediction{}, fmt.Errorf("predict %s: %w: M0 %g remaining %g relaunch %g", c, ErrBadInputs, in.M0, in.Remaining, in.RelaunchS)
	}
	m, ok := in.Models[c.Type]
	if !ok || m == nil {
		return Prediction{}, fmt.Errorf("predict %s: %w for type %s", c, ErrNoModel, c.Type)
	}
	price, ok := in.Prices[c.Type]
	if !ok {
		return Prediction{}, fmt.Errorf("predict %s: %w for type %s", c, ErrNoPrice, c.Type)
	}
	lo, st, hi := stepInterval(m, c)
	if !(st > 0) || math.IsInf(st, 0) {
		return Prediction{}, fmt.Errorf("predict %s: %w: model gives step time %g", c, ErrNoModel, st)
	}
	steps, gain, err := stepsFor(c, in)
	if err != nil {
		return Prediction{}, fmt.Errorf("predict %s: %w", c, err)
	}
	p := Prediction{Candidate: c, StepTime: st, Gain: gain, Goodput: efficiency.Goodput(gain, st), StepLo: lo, StepHi: hi}
	perS := float64(c.Nodes) * price / 3600
	p.RemainingS = steps * st
	p.RemainingUSD = p.RemainingS * perS
	if c != in.Current {
		p.SwitchS = in.RelaunchS
		p.SwitchUSD = in.RelaunchS * perS
	}
	p.TotalS = p.RemainingS + p.SwitchS
	p.TotalUSD = p.RemainingUSD + p.SwitchUSD
	p.TotalSLo, p.TotalSHi = steps*lo+p.SwitchS, steps*hi+p.SwitchS
	p.TotalUSDLo, p.TotalUSDHi = steps*lo*perS+p.SwitchUSD, steps*hi*perS+p.SwitchUSD
	if hi > lo*LowConfidenceRatio {
		p.Flags |= FlagLowConfidence
	}
	return p, nil
}

// Pessimistic is p with its step time and totals at the upper end of the
// step time's 90 % interval, what a decision that must not rely on an
// unvalidated model compares; a prediction of zero width (a measured
// configuration) is unchanged.
func (p Prediction) Pessimistic() Prediction {
	if p.StepHi <= p.StepTime || !(p.StepTime > 0) {
		return p
	}
	f := p.StepHi / p.StepTime
	p.StepTime = p.StepHi
	p.RemainingS *= f
	p.RemainingUSD *= f
	p.TotalS, p.TotalUSD = p.TotalSHi, p.TotalUSDHi
	return p
}

// stepInterval is the model's step time at c with its interval.
func stepInterval(m StepTimer, c Candidate) (lo, pt, hi float64) {
	if r, ok := m.(Ranged); ok {
		lo, pt, hi = r.Interval(c.Nodes, c.Workers, c.Local())
		if lo <= pt && pt <= hi {
			return lo, pt, hi
		}
	}
	pt = m.StepTime(c.Nodes, c.Workers, c.Local())
	return pt, pt, pt
}

// stepsFor is the number of steps c needs for the remaining work, and the
// progress of one of them.
func stepsFor(c Candidate, in Inputs) (steps, gain float64, err error) {
	s := float64(c.Batch) / in.M0
	if in.Stats != nil {
		steps = in.Stats.Steps(in.Remaining, c.Batch)
		if !(steps >= 0) || math.IsInf(steps, 0) {
			return 0, 0, fmt.Errorf("%w: statistics give %g steps", ErrBadInputs, steps)
		}
		if steps == 0 {
			return 0, s, nil
		}
		return steps, in.Remaining / steps, nil
	}
	gain = efficiency.Gain(in.Sqr, in.Var, s)
	steps, err = efficiency.Steps(in.Remaining, gain)
	if err != nil {
		return 0, 0, err
	}
	if in.NoiseIntegral > 0 && s > 1 {
		steps = in.Remaining/s + (1-1/s)*math.Min(in.NoiseIntegral, in.Remaining)
	}
	return steps, gain, nil
}

// All predicts every candidate, skipping those whose type has no model and
// those the model declines (step time +Inf); any other error is returned.
func All(cands []Candidate, in Inputs) ([]Prediction, error) {
	out := make([]Prediction, 0, len(cands))
	for _, c := range cands {
		m, ok := in.Models[c.Type]
		if !ok || m == nil {
			continue
		}
		if c.Validate() == nil && math.IsInf(m.StepTime(c.Nodes, c.Workers, c.Local()), 1) {
			continue
		}
		p, err := Predict(c, in)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	MarkNonMonotone(out)
	return out, nil
}

// monotoneTol is the relative slack MarkNonMonotone allows (rounding, and
// the noise of measured step times laid over a model).
const monotoneTol = 0.01

// MarkNonMonotone sets FlagNonMonotone on the predictions that break, with
// the next smaller local batch of the same type and placement, the physical
// order of step times: a larger local batch takes no less time per step and
// no more per sample.
func MarkNonMonotone(preds []Prediction) {
	type key struct {
		typ  string
		n, k int
	}
	groups := map[key][]int{}
	for i, p := range preds {
		k := key{p.Type, p.Nodes, p.Workers}
		groups[k] = append(groups[k], i)
	}
	for _, idx := range groups {
		if len(idx) < 2 {
			continue
		}
		sort.Slice(idx, func(a, b int) bool { return preds[idx[a]].Batch < preds[idx[b]].Batch })
		for j := 1; j < len(idx); j++ {
			a, b := &preds[idx[j-1]], &preds[idx[j]]
			if b.StepTime < a.StepTime*(1-monotoneTol) || b.StepTime/b.Local() > a.StepTime/a.Local()*(1+monotoneTol) {
				a.Flags |= FlagNonMonotone
				b.Flags |= FlagNonMonotone
			}
		}
	}
}
