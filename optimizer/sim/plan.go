package sim

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// PlanRow is one line of `scavctl plan`: a candidate and its whole-job time
// and cost — measured (from the traces), or as a policy predicted them, with
// the step time's 90 % interval and the flags that say not to read a
// prediction as a fact.
type PlanRow struct {
	Type      string  `json:"type"`
	Nodes     int     `json:"nodes"`
	Workers   int     `json:"workers"`
	Batch     int     `json:"batch"`
	StepTimeS float64 `json:"step_time_s"`
	TimeS     float64 `json:"time_s"`
	CostUSD   float64 `json:"cost_usd"`
	// StepLoS and StepHiS bound a predicted step time (equal to it when
	// measured); Flags are predict.Flag's words (low-confidence,
	// non-monotone).
	StepLoS float64  `json:"step_lo_s,omitempty"`
	StepHiS float64  `json:"step_hi_s,omitempty"`
	Flags   []string `json:"flags,omitempty"`
	// MeasuredStepS is the traces' step time, beside a prediction.
	MeasuredStepS float64 `json:"measured_step_s,omitempty"`
}

// Plan returns every candidate of the traces in opts with its measured step
// time (interpolated) and the time and cost of the whole job run in it,
// sorted by opts.Objective.Kind (objective.Rank).
func Plan(ctx context.Context, opts Options) ([]PlanRow, error) {
	w, err := load(&opts)
	if err != nil {
		return nil, err
	}
	var preds []predict.Prediction
	for i, c := range w.cands {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("plan %s: %w", w.app.Name, err)
			}
		}
		jct, cost := w.fixedOutcome(c)
		st, _ := w.stepTime(c)
		preds = append(preds, predict.Prediction{Candidate: c, StepTime: st, TotalS: jct, TotalUSD: cost})
	}
	return PlanRows(preds, opts.Objective.Kind)
}

// PlanPredicted simulates opts.Policy on the traces and returns its last
// predictions of every candidate — the whole job from there, with the step
// time's interval and flags — beside the traces' step times, sorted by
// opts.Objective.Kind.
func PlanPredicted(ctx context.Context, opts Options) ([]PlanRow, error) {
	rep, err := Run(ctx, opts)
	if err != nil {
		return nil, err
	}
	if len(rep.Predictions) == 0 {
		return nil, fmt.Errorf("plan %s with policy %s: %w", rep.App, rep.Policy, ErrNoPredictions)
	}
	w, err := load(&opts)
	if err != nil {
		return nil, err
	}
	rows, err := PlanRows(rep.Predictions, opts.Objective.Kind)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		r := &rows[i]
		r.MeasuredStepS, _ = w.stepTime(predict.Candidate{Type: r.Type, Nodes: r.Nodes, Workers: r.Workers, Batch: r.Batch})
	}
	return rows, nil
}

// PlanRows orders predictions (from a trace, a stored model or a policy,
// see predict.All) for kind and turns them into plan rows.
func PlanRows(preds []predict.Prediction, kind objective.Kind) ([]PlanRow, error) {
	idx, err := objective.Rank(preds, kind)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	rows := make([]PlanRow, 0, len(idx))
	for _, i := range idx {
		p := preds[i]
		row := PlanRow{Type: p.Type, Nodes: p.Nodes, Workers: p.Workers, Batch: p.Batch, StepTimeS: p.StepTime, TimeS: p.TotalS, CostUSD: p.TotalUSD, Flags: p.Flags.Words()}
		if p.StepHi > p.StepLo {
			row.StepLoS, row.StepHiS = p.StepLo, p.StepHi
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// WritePlan writes plan rows as an aligned text table; predicted rows show
// the step time's 90 % interval, the traces' step time and their flags.
func WritePlan(w io.Writer, rows []PlanRow) error {
	var b strings.Builder
	predicted := false
	for _, r := range rows {
		predicted = predicted || r.MeasuredStepS > 0 || r.StepHiS > 0
	}
	if !predicted {
		fmt.Fprintf(&b, "%-10s %5s %7s %7s %10s %12s %10s\n", "TYPE", "NODES", "WORKERS", "BATCH", "STEP_S", "TIME", "COST_$")
		for _, r := range rows {
			fmt.Fprintf(&b, "%-10s %5d %7d %7d %10.4f %12s %10.2f\n", r.Type, r.Nodes, r.Workers, r.Batch, r.StepTimeS, fmtDuration(r.TimeS), r.CostUSD)
		}
	} else {
		fmt.Fprintf(&b, "%-10s %5s %7s %7s %10s %19s %10s %12s %10s  %s\n", "TYPE", "NODES", "WORKERS", "BATCH", "STEP_S", "90%_INTERVAL", "MEASURED", "TIME", "COST_$", "FLAGS")
		for _, r := range rows {
			iv := "measured"
			if r.StepHiS > 0 {
				iv = fmt.Sprintf("%.4f..%.4f", r.StepLoS, r.StepHiS)
			}
			fmt.Fprintf(&b, "%-10s %5d %7d %7d %10.4f %19s %10.4f %12s %10.2f  %s\n", r.Type, r.Nodes, r.Workers, r.Batch, r.StepTimeS, iv, r.MeasuredStepS, fmtDuration(r.TimeS), r.CostUSD, strings.Join(r.Flags, ","))
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	return nil
}

func fmtDuration(s float64) string {
	h := int(s) / 3600
	m := (int(s) % 3600) / 60
	sec := int(s) % 60
	if h > 0 {
		return fmt.Sprintf("%dh%02dm%02ds", h, m, sec)
	}
	return fmt.Sprintf("%dm%02ds", m, sec)
}
