package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/daemon"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// jobReport is what `scavctl report` shows: the job's timeline, the
// optimizer's predictions against what was measured, and the totals.
type jobReport struct {
	Job       string          `json:"job"`
	State     string          `json:"state"`
	Policy    string          `json:"policy,omitempty"`
	Objective string          `json:"objective,omitempty"`
	Timeline  []reportAttempt `json:"timeline"`
	Decisions int             `json:"decisions"`
	TotalS    float64         `json:"total_s"`
	// RelaunchS adds up the relaunches' overhead (checkpoint, exit, start, first step).
	RelaunchS float64 `json:"relaunch_s"`
	// CostUSD is the wall time at the machine's price (PriceUSDPerHour).
	CostUSD         float64 `json:"cost_usd"`
	PriceUSDPerHour float64 `json:"price_usd_per_hour"`
}

type reportAttempt struct {
	daemon.Attempt
	WallS float64 `json:"wall_s"`
	// MeasuredStepS is the median step time of rank 0 after the warm-up;
	// PredictedStepS what the policy predicted for this configuration when it chose it.
	MeasuredStepS  float64 `json:"measured_step_s,omitempty"`
	PredictedStepS float64 `json:"predicted_step_s,omitempty"`
}

func newReportCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "report JOB",
		Short: "Show a job's timeline, predicted vs measured step times, and its time and cost",
		Long: `report shows each attempt of a job — its configuration, wall time, steps and how
it ended — with the relaunch overhead broken into checkpoint, exit, start and
first step; the step time the policy predicted for each configuration it chose
against the one measured there; and the job's total time and cost.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			return a.withClient(cmd.Context(), func(ctx context.Context, c *daemon.Client) error {
				rep, err := buildReport(ctx, c, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return a.printJSON(rep)
				}
				return rep.print(a.stdout)
			})
		},
	}
	addOutputFlag(a, cmd)
	return cmd
}

func buildReport(ctx context.Context, c *daemon.Client, id string) (jobReport, error) {
	j, err := c.Job(ctx, id)
	if err != nil {
		return jobReport{}, err
	}
	dts := map[int][]float64{}
	seen := map[int]int{}
	err = c.Steps(ctx, id, false, func(r telemetry.StepRecord) error {
		if r.Rank == 0 && r.Seconds > 0 {
			if seen[r.Attempt]++; seen[r.Attempt] > warmup {
				dts[r.Attempt] = append(dts[r.Attempt], r.Seconds)
			}
		}
		return nil
	})
	if err != nil {
		return jobReport{}, err
	}
	price := j.Optimize.PriceUSDPerHour
	if price == 0 {
		price = 1
	}
	rep := jobReport{Job: j.ID, State: string(j.State), Policy: j.Optimize.Policy, Objective: j.Optimize.Objective,
		Decisions: len(j.Decisions), PriceUSDPerHour: price}
	for _, at := range j.Attempts {
		ra := reportAttempt{Attempt: at, MeasuredStepS: median(dts[at.Attempt])}
		end := time.Now()
		if at.Ended != nil {
			end = *at.Ended
		}
		ra.WallS = end.Sub(at.Started).Seconds()
		for _, d := range j.Decisions {
			if d.To.Workers == at.Config.Workers && d.To.GlobalBatch == at.Config.GlobalBatch && d.PredictedStepS > 0 && !d.Time.After(at.Started) {
				ra.PredictedStepS = d.PredictedStepS
			}
		}
		if m := at.Move; m != nil {
			rep.RelaunchS += m.Checkpoint + m.Exit + m.Start + m.FirstStep
		}
		rep.Timeline = append(rep.Timeline, ra)
	}
	if j.Started != nil {
		end := time.Now()
		if j.Ended != nil {
			end = *j.Ended
		}
		rep.TotalS = end.Sub(*j.Started).Seconds()
	}
	rep.CostUSD = rep.TotalS / 3600 * price
	return rep, nil
}

// warmup steps of each attempt are left out of its measured step time, as the controller does.
const warmup = 3

func (r jobReport) print(w io.Writer) error {
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
		return err
	}
	fmt.Fprintf(w, "Total: %s, $%.4f at $%.2f/h; relaunches %.2fs\n", time.Duration(r.TotalS*float64(time.Second)).Round(time.Millisecond), r.CostUSD, r.PriceUSDPerHour, r.RelaunchS)
	return nil
}
