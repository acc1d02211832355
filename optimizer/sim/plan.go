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
// and cost.
type PlanRow struct {
	Type      string  `json:"type"`
	Nodes     int     `json:"nodes"`
	Workers   int     `json:"workers"`
	Batch     int     `json:"batch"`
	StepTimeS float64 `json:"step_time_s"`
	TimeS     float64 `json:"time_s"`
	CostUSD   float64 `json:"cost_usd"`
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

// PlanRows orders predictions (from a trace or a stored model, see
// predict.All) for kind and turns them into plan rows.
func PlanRows(preds []predict.Prediction, kind objective.Kind) ([]PlanRow, error) {
	idx, err := objective.Rank(preds, kind)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	rows := make([]PlanRow, 0, len(idx))
	for _, i := range idx {
		p := preds[i]
		rows = append(rows, PlanRow{Type: p.Type, Nodes: p.Nodes, Workers: p.Workers, Batch: p.Batch, StepTimeS: p.StepTime, TimeS: p.TotalS, CostUSD: p.TotalUSD})
	}
	return rows, nil
}

// WritePlan writes plan rows as an aligned text table.
func WritePlan(w io.Writer, rows []PlanRow) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %5s %7s %7s %10s %12s %10s\n", "TYPE", "NODES", "WORKERS", "BATCH", "STEP_S", "TIME", "COST_$")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-10s %5d %7d %7d %10.4f %12s %10.2f\n", r.Type, r.Nodes, r.Workers, r.Batch, r.StepTimeS, fmtDuration(r.TimeS), r.CostUSD)
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
