// Package report owns the analysis and rendering behind `scavctl report`
// and `scavctl top`, as pure values and functions: the report of a job
// (JobReport: its timeline, the optimizer's predictions against what was
// measured, its time and cost, and the figures and HTML page drawn from
// them) and top's frames (TopTracker and NodeTracker fold step records and
// node samples, BuildTopFrame joins them with the job records, RenderTop
// lays a frame out for a terminal). It takes job records, step records,
// node samples and times; fetching them and writing files or terminals is
// the caller's.
package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/scavenger-ml/scavenger/stepstats"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// JobReport is what `scavctl report` shows: the job's timeline, the
// optimizer's predictions against what was measured, and the totals; the
// series behind its figures (noise scale, cost, the candidates of a
// decision) come with it in JSON.
type JobReport struct {
	Job       string    `json:"job"`
	State     string    `json:"state"`
	Policy    string    `json:"policy,omitempty"`
	Objective string    `json:"objective,omitempty"`
	Timeline  []Attempt `json:"timeline"`
	Decisions int       `json:"decisions"`
	TotalS    float64   `json:"total_s"`
	// RelaunchS adds up the relaunches' overhead (checkpoint, exit, start, first step).
	RelaunchS float64 `json:"relaunch_s"`
	// CostUSD is the wall time at the machine's price (PriceUSDPerHour).
	CostUSD         float64 `json:"cost_usd"`
	PriceUSDPerHour float64 `json:"price_usd_per_hour"`

	// Noise is the gradient noise scale (samples) over the job, from rank
	// 0's gradient norms step by step (stepstats.NoiseSeries; times in
	// seconds since the job started).
	Noise []stepstats.Point `json:"noise,omitempty"`
	// Cost is the cumulative cost over the job; PredictedCost, per decision
	// that predicted one, the cost at the finish it predicted.
	Cost          []stepstats.Point `json:"cost,omitempty"`
	PredictedCost []stepstats.Point `json:"predicted_cost,omitempty"`
	// Candidates are the predictions the latest model-based decision chose
	// among (CandidatesStep is that decision's step).
	Candidates     []api.CandidatePrediction `json:"candidates,omitempty"`
	CandidatesStep int64                     `json:"candidates_step,omitempty"`

	decisions []api.Decision
	start     time.Time // the origin of the series' times
}

// Attempt is one attempt of a job's timeline, with its step times.
type Attempt struct {
	api.Attempt
	WallS float64 `json:"wall_s"`
	// MeasuredStepS is the median step time of rank 0 after the warm-up;
	// PredictedStepS what the policy predicted for this configuration when it chose it.
	MeasuredStepS  float64 `json:"measured_step_s,omitempty"`
	PredictedStepS float64 `json:"predicted_step_s,omitempty"`
	// ModelStepS is what the model of the latest model-based decision
	// predicts for this configuration (0 when it made none).
	ModelStepS float64 `json:"model_step_s,omitempty"`
	// PredictedFlags and ModelFlags say what made those predictions
	// doubtful (low-confidence, non-monotone): they are not facts.
	PredictedFlags []string `json:"predicted_flags,omitempty"`
	ModelFlags     []string `json:"model_flags,omitempty"`
}

// maxNoisePoints bounds the noise series of a report.
const maxNoisePoints = 300

// warmup steps of each attempt are left out of its measured step time, as the controller does.
const warmup = 3

// Make is the report of job j from rank 0's step records; now ends what
// is still running.
func Make(j api.Job, recs []telemetry.StepRecord, now time.Time) JobReport {
	price := j.Optimize.PriceUSDPerHour
	if price == 0 {
		price = 1
	}
	rep := JobReport{Job: j.ID, State: string(j.State), Policy: j.Optimize.Policy, Objective: j.Optimize.Objective,
		Decisions: len(j.Decisions), PriceUSDPerHour: price, decisions: j.Decisions}
	for i := len(j.Decisions) - 1; i >= 0; i-- {
		if d := j.Decisions[i]; len(d.Candidates) > 0 {
			rep.Candidates, rep.CandidatesStep = d.Candidates, d.Step
			break
		}
	}
	rep.timeline(j, recs, now)
	start := j.Created
	if j.Started != nil {
		start = *j.Started
		end := now
		if j.Ended != nil {
			end = *j.Ended
		}
		rep.TotalS = end.Sub(start).Seconds()
	}
	rep.start = start
	rep.CostUSD = rep.TotalS / 3600 * price
	if rep.TotalS > 0 {
		// The node is billed from start to end, relaunches included: the
		// cost grows linearly, the attempts' boundaries marked.
		rep.Cost = append(rep.Cost, stepstats.Point{T: 0, V: 0})
		for _, at := range rep.Timeline[min(1, len(rep.Timeline)):] {
			t := at.Started.Sub(start).Seconds()
			rep.Cost = append(rep.Cost, stepstats.Point{T: t, V: t / 3600 * price})
		}
		rep.Cost = append(rep.Cost, stepstats.Point{T: rep.TotalS, V: rep.CostUSD})
	}
	for _, d := range j.Decisions {
		if d.PredictedUSD > 0 {
			t := d.Time.Sub(start).Seconds()
			rep.PredictedCost = append(rep.PredictedCost, stepstats.Point{T: t, V: t/3600*price + d.PredictedUSD})
		}
	}
	rep.Noise = stepstats.NoiseSeries(recs, BaseBatch(j), float64(start.UnixNano())/1e9, maxNoisePoints)
	return rep
}

// BaseBatch is the batch job j's noise scale is measured against: its first
// attempt's global batch (the configured one before any attempt).
func BaseBatch(j api.Job) float64 {
	if len(j.Attempts) > 0 {
		return float64(j.Attempts[0].Config.GlobalBatch)
	}
	return float64(j.Config.GlobalBatch)
}

// timeline sets the report's attempts: their wall time, measured step time
// (rank 0's after the warm-up), the step time predicted when they were
// chosen and by the latest model, and the relaunch overhead.
func (r *JobReport) timeline(j api.Job, recs []telemetry.StepRecord, now time.Time) {
	dts := map[int][]float64{}
	seen := map[int]int{}
	for _, rec := range recs {
		if rec.Rank == 0 && rec.Seconds > 0 {
			if seen[rec.Attempt]++; seen[rec.Attempt] > warmup {
				dts[rec.Attempt] = append(dts[rec.Attempt], rec.Seconds)
			}
		}
	}
	for _, at := range j.Attempts {
		ra := Attempt{Attempt: at, MeasuredStepS: stepstats.Median(dts[at.Attempt])}
		end := now
		if at.Ended != nil {
			end = *at.Ended
		}
		ra.WallS = end.Sub(at.Started).Seconds()
		for _, d := range j.Decisions {
			if d.To.Workers == at.Config.Workers && d.To.GlobalBatch == at.Config.GlobalBatch && d.PredictedStepS > 0 && !d.Time.After(at.Started) {
				ra.PredictedStepS, ra.PredictedFlags = d.PredictedStepS, d.PredictedFlags
			}
		}
		for _, c := range r.Candidates {
			if c.Workers == at.Config.Workers && c.Batch == at.Config.GlobalBatch {
				ra.ModelStepS, ra.ModelFlags = c.StepS, c.Flags
			}
		}
		if m := at.Move; m != nil {
			r.RelaunchS += m.Checkpoint + m.Exit + m.Start + m.FirstStep
		}
		r.Timeline = append(r.Timeline, ra)
	}
}

// Print writes the report as text: a line on the job, a table of its
// attempts, and the totals.
func (r JobReport) Print(w io.Writer) error {
	fmt.Fprintf(w, "Job %s (%s)", r.Job, r.State)
	if r.Policy != "" {
		fmt.Fprintf(w, ", policy %s, objective %s, %d decision(s)", r.Policy, r.Objective, r.Decisions)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tWORKERS\tBATCH\tSTEPS\tWALL\tSTEP MEASURED\tSTEP PREDICTED\tENDED BY\tRELAUNCH: CKPT+EXIT+START+FIRST")
	for _, a := range r.Timeline {
		steps, pred, move := "-", "-", "-"
		if a.LastStep > 0 {
			steps = fmt.Sprintf("%d..%d", a.FirstStep, a.LastStep)
		}
		if a.PredictedStepS > 0 {
			pred = fmt.Sprintf("%.1f ms (%+.0f%%)", a.PredictedStepS*1e3, pct(a.PredictedStepS, a.MeasuredStepS))
			if len(a.PredictedFlags) > 0 {
				pred += " [" + strings.Join(a.PredictedFlags, ",") + "]"
			}
		}
		if m := a.Move; m != nil {
			move = fmt.Sprintf("%.2fs = %.2f+%.2f+%.2f+%.2f", m.Checkpoint+m.Exit+m.Start+m.FirstStep, m.Checkpoint, m.Exit, m.Start, m.FirstStep)
			if m.Fallback {
				move += " (fallback: stopped)"
			}
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%.1fs\t%.1f ms\t%s\t%s\t%s\n", a.Attempt.Attempt, a.Config.Workers, batchText(a.Config.GlobalBatch),
			steps, a.WallS, a.MeasuredStepS*1e3, pred, a.EndReason, move)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("print report of %s: %w", r.Job, err)
	}
	_, err := fmt.Fprintf(w, "Total: %s, $%.4f at $%.2f/h; relaunches %.2fs\n", time.Duration(r.TotalS*float64(time.Second)).Round(time.Millisecond), r.CostUSD, r.PriceUSDPerHour, r.RelaunchS)
	if err != nil {
		return fmt.Errorf("print report of %s: %w", r.Job, err)
	}
	return nil
}

// batchText is how reports write a global batch: the number, or "(script's
// own)" for 0 (the script chose it).
func batchText(b int) string {
	if b == 0 {
		return "(script's own)"
	}
	return fmt.Sprint(b)
}

// pct is v's difference from ref in percent of ref (0 when ref is 0).
func pct(v, ref float64) float64 {
	if ref == 0 {
		return 0
	}
	return 100 * (v - ref) / ref
}
