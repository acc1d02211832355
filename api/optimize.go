package api

import (
	"fmt"
	"time"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/plugins"
)

// Optimize is what a job asks of the optimizer (part of RunRequest).
type Optimize struct {
	// Policy names the search policy (policy.Names); empty or "fixed" never moves.
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
	// TargetSamples is the work of the whole job in samples (at the start's
	// statistical efficiency); the script is told it as SCAV_TARGET_SAMPLES.
	TargetSamples int64 `json:"target_samples,omitempty"`
	// MachineType and PriceUSDPerHour describe this node for cost objectives.
	MachineType     string  `json:"machine_type,omitempty"`
	PriceUSDPerHour float64 `json:"price_usd_per_hour,omitempty"`
	// Types, Spot and MaxPriceUSD are the cloud choices of a launcher that
	// acquires machines (cloudvm; see CloudSpec): the machine types the job
	// may run on, whether spot machines may be bought (on demand is the
	// fallback), and the most one machine may cost an hour (0: no cap).
	Types       []string `json:"types,omitempty"`
	Spot        bool     `json:"spot,omitempty"`
	MaxPriceUSD float64  `json:"max_price_usd,omitempty"`
	// ModelKey names the job's entries in the model store (see models.go);
	// empty: a hash of the command and its arguments.
	ModelKey string `json:"model_key,omitempty"`
}

// Active reports whether the job runs under a moving policy.
func (o Optimize) Active() bool { return o.Policy != "" && o.Policy != "fixed" }

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
	Phase policy.Phase `json:"phase"`
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

// Spec builds the policy's search space for a job that starts at start on
// one node: its machine type with MinWorkers..MaxWorkers workers (at most
// maxWorkers when positive) and power-of-two batches in the batch bounds. It
// also returns the price per hour the cost objectives use.
func (opt Optimize) Spec(start plugins.Config, maxWorkers int) (policy.Spec, float64, error) {
	kind, err := objective.ParseKind(opt.Objective)
	if opt.Objective == "" {
		kind, err = objective.Time, nil
	}
	if err != nil {
		return policy.Spec{}, 0, fmt.Errorf("objective: %w", err)
	}
	if start.GlobalBatch < 1 {
		return policy.Spec{}, 0, fmt.Errorf("an optimized job needs a starting --batch-size")
	}
	minW, maxW := max(1, opt.MinWorkers), opt.MaxWorkers
	if maxW == 0 {
		maxW = start.Workers
	}
	if maxWorkers > 0 {
		maxW = min(maxW, maxWorkers)
	}
	minB, maxB := opt.MinBatch, opt.MaxBatch
	if minB == 0 {
		minB = start.GlobalBatch
	}
	if maxB == 0 {
		maxB = start.GlobalBatch
	}
	if minW > maxW || minB > maxB {
		return policy.Spec{}, 0, fmt.Errorf("empty bounds: workers %d:%d, batch %d:%d", minW, maxW, minB, maxB)
	}
	var batches []int
	for b := minB; b <= maxB; b *= 2 {
		batches = append(batches, b)
	}
	if batches[len(batches)-1] != maxB {
		batches = append(batches, maxB)
	}
	typ := opt.MachineType
	if typ == "" {
		typ = "local"
	}
	cands, err := predict.Enumerate([]predict.Shape{{Type: typ, GPUsPerNode: maxW, MaxNodes: 1}}, batches,
		predict.Limits{MinWorkers: minW, MaxWorkers: maxW})
	if err != nil {
		return policy.Spec{}, 0, fmt.Errorf("enumerate candidates: %w", err)
	}
	var keep []predict.Candidate
	for _, c := range cands {
		if c.Batch%c.Workers == 0 {
			keep = append(keep, c)
		}
	}
	if len(keep) == 0 {
		return policy.Spec{}, 0, fmt.Errorf("no configuration in workers %d:%d, batch %d:%d divides evenly", minW, maxW, minB, maxB)
	}
	m0 := float64(start.GlobalBatch)
	target := float64(opt.TargetSamples) / m0
	if target <= 0 {
		return policy.Spec{}, 0, fmt.Errorf("an optimized job needs a target: --target-steps, --target-samples or --target-epochs")
	}
	price := opt.PriceUSDPerHour
	if price == 0 {
		price = 1
	}
	return policy.Spec{
		Candidates: keep,
		Prices:     map[string]float64{typ: price},
		M0:         m0,
		Target:     target,
		Objective:  objective.Objective{Kind: kind, DeadlineS: opt.Deadline.D().Seconds(), BudgetUSD: opt.BudgetUSD},
		RelaunchS:  3,
	}, price, nil
}
