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
	st := m.StepTime(c.Nodes, c.Workers, c.Local())
	if !(st > 0) || math.IsInf(st, 0) {
		return Prediction{}, fmt.Errorf("predict %s: %w: model gives step time %g", c, ErrNoModel, st)
	}
	gain := efficiency.Gain(in.Sqr, in.Var, float64(c.Batch)/in.M0)
	p := Prediction{Candidate: c, StepTime: st, Gain: gain, Goodput: efficiency.Goodput(gain, st)}
	steps, err := efficiency.Steps(in.Remaining, gain)
	if err != nil {
		return Prediction{}, fmt.Errorf("predict %s: %w", c, err)
	}
	if s := float64(c.Batch) / in.M0; in.NoiseIntegral > 0 && s > 1 {
		steps = in.Remaining/s + (1-1/s)*math.Min(in.NoiseIntegral, in.Remaining)
	}
	perS := float64(c.Nodes) * price / 3600
	p.RemainingS = steps * st
	p.RemainingUSD = p.RemainingS * perS
	if c != in.Current {
		p.SwitchS = in.RelaunchS
		p.SwitchUSD = in.RelaunchS * perS
	}
	p.TotalS = p.RemainingS + p.SwitchS
	p.TotalUSD = p.RemainingUSD + p.SwitchUSD
	return p, nil
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
	return out, nil
}
