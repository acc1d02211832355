package api

import (
	"fmt"
	"time"

	"github.com/scavenger-ml/scavenger/plugins"
)

// Optimize is what a job asks of the optimizer (part of RunRequest).
type Optimize struct {
	// Policy names the search policy (the optimizer's policy.Names); empty
	// or "fixed" never moves.
	Policy string `json:"policy,omitempty"`
	// Objective is time, cost or knee; Deadline and BudgetUSD bound it.
	Objective string   `json:"objective,omitempty"`
	Deadline  Duration `json:"deadline,omitempty"`
	BudgetUSD float64  `json:"budget_usd,omitempty"`
	// MinWorkers..MaxWorkers and MinBatch..MaxBatch bound the search (0: the start's).
	MinWorkers int `json:"min_workers,omitempty"`
	MaxWorkers int `json:"max_workers,omitempty"`
	MinBatch   int `json:"min_batch,omitempty"`
	MaxBatch   int `json:"max_batch,omitempty"`
	// TargetSamples is the work of the whole job in samples at the
	// statistical efficiency of batch BaseBatch: its scale-invariant
	// progress times BaseBatch, what the optimizer plans. The script is
	// told it as SCAV_TARGET_SAMPLES, and the base as SCAV_BASE_BATCH.
	TargetSamples int64 `json:"target_samples,omitempty"`
	// BaseBatch is the global batch the work is counted at (the paper's
	// M0; 0: the starting batch). Jobs that start at different batches do
	// the same work only with the same base.
	BaseBatch int `json:"base_batch,omitempty"`
	// MachineType and PriceUSDPerHour describe this node for cost objectives.
	MachineType     string  `json:"machine_type,omitempty"`
	PriceUSDPerHour float64 `json:"price_usd_per_hour,omitempty"`
	// Types, Spot and MaxPriceUSD are the cloud choices of a launcher that
	// acquires machines (cloudvm; see daemon/control.CloudSpec): the machine
	// types the job may run on, whether spot machines may be bought (on
	// demand is the fallback), and the most one machine may cost an hour
	// (0: no cap).
	Types       []string `json:"types,omitempty"`
	Spot        bool     `json:"spot,omitempty"`
	MaxPriceUSD float64  `json:"max_price_usd,omitempty"`
	// ModelKey names the job's entries in the model store (see models.go);
	// empty: a hash of the command and its arguments.
	ModelKey string `json:"model_key,omitempty"`
}

// Base is the batch the work is counted at when the job starts at a
// global batch of start: BaseBatch, or start.
func (o Optimize) Base(start int) int {
	if o.BaseBatch > 0 {
		return o.BaseBatch
	}
	return start
}

// Fixed is o as a job that starts at a global batch of start keeps it: a
// target's base batch set once (Base), so that the work does not move with
// the batch a later attempt runs at.
func (o Optimize) Fixed(start int) Optimize {
	if o.TargetSamples > 0 {
		o.BaseBatch = o.Base(start)
	}
	return o
}

// Active reports whether the job runs under a moving policy.
func (o Optimize) Active() bool { return o.Policy != "" && o.Policy != "fixed" }

// signs refuses the amounts that cannot be negative.
func (o Optimize) signs() []error {
	var errs []error
	for _, v := range []struct {
		flag string
		bad  bool
		val  any
	}{
		{"--deadline", o.Deadline < 0, o.Deadline.D()},
		{"--budget", o.BudgetUSD < 0, o.BudgetUSD},
		{"--target-samples", o.TargetSamples < 0, o.TargetSamples},
		{"--base-batch", o.BaseBatch < 0, o.BaseBatch},
		{"--price", o.PriceUSDPerHour < 0, o.PriceUSDPerHour},
		{"--max-price", o.MaxPriceUSD < 0, o.MaxPriceUSD},
	} {
		if v.bad {
			errs = append(errs, fmt.Errorf("%s %v: must not be negative", v.flag, v.val))
		}
	}
	return errs
}

// Decision is one decision of a job's policy, as kept in its record.
type Decision struct {
	Time   time.Time      `json:"t"`
	Step   int64          `json:"step"`
	From   plugins.Config `json:"from"`
	To     plugins.Config `json:"to"`
	Reason string         `json:"reason"`
	// PredictedStepS is the step time predicted for To (0 when not predicted),
	// PredictedStepLoS..HiS its 90 % interval, and PredictedFlags what makes
	// it doubtful (predict.Flag's words: low-confidence, non-monotone).
	PredictedStepS   float64  `json:"predicted_step_s,omitempty"`
	PredictedStepLoS float64  `json:"predicted_step_lo_s,omitempty"`
	PredictedStepHiS float64  `json:"predicted_step_hi_s,omitempty"`
	PredictedFlags   []string `json:"predicted_flags,omitempty"`
	// Provisional marks a decision taken before the noise forecast was
	// mature; the policy revisits it.
	Provisional bool `json:"provisional,omitempty"`
	// PredictedS and PredictedUSD are the predicted time and cost to finish in To.
	PredictedS   float64 `json:"predicted_s,omitempty"`
	PredictedUSD float64 `json:"predicted_usd,omitempty"`
	// SpentUSD is what the job's machines had cost when it was made, as
	// their charges said then (a cloud job's; 0: not known): with the
	// minimum of a machine that had ended, which its attempt's bill takes
	// in whole.
	SpentUSD float64 `json:"spent_usd,omitempty"`
	// PredictedSteps are the steps to finish in To; PredictedLoS..HiS and
	// PredictedUSDLo..Hi the 90 % intervals of the time and cost (see Left).
	PredictedSteps float64 `json:"predicted_steps,omitempty"`
	PredictedLoS   float64 `json:"predicted_lo_s,omitempty"`
	PredictedHiS   float64 `json:"predicted_hi_s,omitempty"`
	PredictedUSDLo float64 `json:"predicted_usd_lo,omitempty"`
	PredictedUSDHi float64 `json:"predicted_usd_hi,omitempty"`
	// Alternatives counts the candidates the choice was made among.
	Alternatives int `json:"alternatives,omitempty"`
	// Candidates are the predictions the choice was made among, as the
	// policy computed them (a bounded number of them; nil when the
	// decision evaluated none). The job record keeps them on its latest
	// decision that has them only. scavctl report draws their time–cost front.
	Candidates []CandidatePrediction `json:"candidates,omitempty"`
	// Phase is the policy's phase after the decision: warm-up, probing or optimised.
	Phase Phase `json:"phase"`
	// Probe is, for a decision that measures a configuration, how long and
	// what it is expected to gain (nil for others).
	Probe *ProbeValue `json:"probe,omitempty"`
	// ThroughputOnly marks a decision taken without gradient statistics:
	// by throughput (per dollar) alone.
	ThroughputOnly bool `json:"throughput_only,omitempty"`
	// Words says the decision in plain English, what and why, as decision
	// lines and reports show it; Reason is the policy's own account.
	Words string `json:"words,omitempty"`
}

// ProbeValue is what a decision that measures a configuration expects:
// Steps of it; and, when the policy valued the probe against the
// incumbent, Gain (the expected improvement of the best candidate it
// informs, whose chance to beat the incumbent is Chance) and Cost (what
// the probe costs beyond its progress), in the objective's GainUnit ("s",
// "$", or "s·$" for the knee's time × cost); Design marks a probe of a
// machine type's identifiability design (the points its model needs).
type ProbeValue struct {
	Steps    float64 `json:"steps,omitempty"`
	Gain     float64 `json:"gain,omitempty"`
	Cost     float64 `json:"cost,omitempty"`
	Chance   float64 `json:"chance,omitempty"`
	GainUnit string  `json:"gain_unit,omitempty"`
	Design   bool    `json:"design,omitempty"`
}

// CandidatePrediction is the policy's forecast for one candidate
// configuration at a decision: what it would take from there to finish.
type CandidatePrediction struct {
	Type    string `json:"type,omitempty"`
	Workers int    `json:"workers"`
	Batch   int    `json:"batch"`
	// StepS is the predicted step time; TotalS and TotalUSD the time and cost
	// to finish in this configuration, a relaunch to get there included.
	StepS    float64 `json:"step_s"`
	TotalS   float64 `json:"total_s"`
	TotalUSD float64 `json:"total_usd"`
	// StepLoS and StepHiS are the step time's 90 % interval; Flags what
	// makes the prediction doubtful (low-confidence, non-monotone).
	StepLoS float64  `json:"step_lo_s,omitempty"`
	StepHiS float64  `json:"step_hi_s,omitempty"`
	Flags   []string `json:"flags,omitempty"`
	// Chosen marks the candidate the decision chose.
	Chosen bool `json:"chosen,omitempty"`
}
