package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// jobReport is what `scavctl report` shows: the job's timeline, the
// optimizer's predictions against what was measured, and the totals; the
// series behind its figures (noise scale, cost, the candidates of a
// decision) come with it in JSON.
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

	// Noise is the gradient noise scale (samples) over the job, from rank
	// 0's gradient norms step by step with the controller's estimator
	// (times in seconds since the job started).
	Noise []seriesPoint `json:"noise,omitempty"`
	// Cost is the cumulative cost over the job; PredictedCost, per decision
	// that predicted one, the cost at the finish it predicted.
	Cost          []seriesPoint `json:"cost,omitempty"`
	PredictedCost []seriesPoint `json:"predicted_cost,omitempty"`
	// Candidates are the predictions the latest model-based decision chose
	// among (CandidatesStep is that decision's step).
	Candidates     []api.CandidatePrediction `json:"candidates,omitempty"`
	CandidatesStep int64                     `json:"candidates_step,omitempty"`

	decisions []api.Decision
	start     time.Time // the origin of the series' times
}

// seriesPoint is one point of a series over the job's time.
type seriesPoint struct {
	T float64 `json:"t_s"`
	V float64 `json:"v"`
}

type reportAttempt struct {
	api.Attempt
	WallS float64 `json:"wall_s"`
	// MeasuredStepS is the median step time of rank 0 after the warm-up;
	// PredictedStepS what the policy predicted for this configuration when it chose it.
	MeasuredStepS  float64 `json:"measured_step_s,omitempty"`
	PredictedStepS float64 `json:"predicted_step_s,omitempty"`
	// ModelStepS is what the model of the latest model-based decision
	// predicts for this configuration (0 when it made none).
	ModelStepS float64 `json:"model_step_s,omitempty"`
}

// reportFormats are the values of --format.
var reportFormats = []string{"text", "json", "html", "svg", "png"}

func newReportCmd(a *app) *cobra.Command {
	var format, out string
	cmd := &cobra.Command{
		Use:   "report JOB",
		Short: "Show a job's timeline, predicted vs measured step times, and its time and cost",
		Long: `report shows each attempt of a job — its configuration, wall time, steps and how
it ended — with the relaunch overhead broken into checkpoint, exit, start and
first step; the step time the policy predicted for each configuration it chose
against the one measured there; and the job's total time and cost.

--format html|svg|png draws it: the configurations over time, step time per
configuration (measured and predicted), the gradient noise scale over time, the
cumulative cost with each decision's predicted cost at the finish, and the
predicted time and cost to finish of every candidate of the latest decision,
with their Pareto front and the chosen one marked. html is one self-contained
file (inline SVG and the tables). --out names the file ("-": standard output;
default JOB-report.EXT); an existing directory gets the file, and for svg and
png one file per figure as well.`,
		Example: `  scavctl report train-1a2b3c
  scavctl report train-1a2b3c --format html --out report.html
  scavctl report train-1a2b3c --format png --out figures/`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := reportFormat(format, a.output, cmd.Flags().Changed("output"))
			if err != nil {
				return err
			}
			return a.withClient(cmd.Context(), func(ctx context.Context, c *api.Client) error {
				rep, err := buildReport(ctx, c, args[0], time.Now())
				if err != nil {
					return err
				}
				return a.writeReport(rep, f, out)
			})
		},
	}
	addOutputFlag(a, cmd)
	cmd.Flags().StringVar(&format, "format", "", "text, json, html, svg or png (default text; -o json is --format json)")
	cmd.Flags().StringVar(&out, "out", "", "file or directory to write to; - is standard output (default: text and json to standard output, the rest to JOB-report.EXT)")
	return cmd
}

// reportFormat reconciles --format with the older -o.
func reportFormat(format, output string, outputSet bool) (string, error) {
	if outputSet && output != "table" && output != "json" {
		return "", fmt.Errorf("-o %q: use table or json", output)
	}
	o := map[string]string{"table": "text", "json": "json"}[output]
	switch {
	case format == "" && outputSet:
		return o, nil
	case format == "":
		return "text", nil
	case outputSet && o != format:
		return "", fmt.Errorf("-o %s and --format %s disagree: give one", output, format)
	}
	for _, f := range reportFormats {
		if f == format {
			return f, nil
		}
	}
	return "", fmt.Errorf("--format %q: use %s", format, strings.Join(reportFormats, ", "))
}

// buildReport fetches a job's record and rank 0's step records and makes its report.
func buildReport(ctx context.Context, c *api.Client, id string, now time.Time) (jobReport, error) {
	j, err := c.Job(ctx, id)
	if err != nil {
		return jobReport{}, err
	}
	var recs []telemetry.StepRecord
	err = c.Steps(ctx, id, false, func(r telemetry.StepRecord) error {
		if r.Rank == 0 && r.IsStep() {
			recs = append(recs, r)
		}
		return nil
	})
	if err != nil {
		return jobReport{}, fmt.Errorf("read steps of %s: %w", id, err)
	}
	return makeReport(j, recs, now), nil
}

// makeReport is the report of job j from rank 0's step records; now ends
// what is still running. It is pure.
func makeReport(j api.Job, recs []telemetry.StepRecord, now time.Time) jobReport {
	dts := map[int][]float64{}
	seen := map[int]int{}
	for _, r := range recs {
		if r.Rank == 0 && r.Seconds > 0 {
			if seen[r.Attempt]++; seen[r.Attempt] > warmup {
				dts[r.Attempt] = append(dts[r.Attempt], r.Seconds)
			}
		}
	}
	price := j.Optimize.PriceUSDPerHour
	if price == 0 {
		price = 1
	}
	rep := jobReport{Job: j.ID, State: string(j.State), Policy: j.Optimize.Policy, Objective: j.Optimize.Objective,
		Decisions: len(j.Decisions), PriceUSDPerHour: price, decisions: j.Decisions}
	for i := len(j.Decisions) - 1; i >= 0; i-- {
		if d := j.Decisions[i]; len(d.Candidates) > 0 {
			rep.Candidates, rep.CandidatesStep = d.Candidates, d.Step
			break
		}
	}
	for _, at := range j.Attempts {
		ra := reportAttempt{Attempt: at, MeasuredStepS: median(dts[at.Attempt])}
		end := now
		if at.Ended != nil {
			end = *at.Ended
		}
		ra.WallS = end.Sub(at.Started).Seconds()
		for _, d := range j.Decisions {
			if d.To.Workers == at.Config.Workers && d.To.GlobalBatch == at.Config.GlobalBatch && d.PredictedStepS > 0 && !d.Time.After(at.Started) {
				ra.PredictedStepS = d.PredictedStepS
			}
		}
		for _, c := range rep.Candidates {
			if c.Workers == at.Config.Workers && c.Batch == at.Config.GlobalBatch {
				ra.ModelStepS = c.StepS
			}
		}
		if m := at.Move; m != nil {
			rep.RelaunchS += m.Checkpoint + m.Exit + m.Start + m.FirstStep
		}
		rep.Timeline = append(rep.Timeline, ra)
	}
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
		rep.Cost = append(rep.Cost, seriesPoint{0, 0})
		for _, at := range rep.Timeline[min(1, len(rep.Timeline)):] {
			t := at.Started.Sub(start).Seconds()
			rep.Cost = append(rep.Cost, seriesPoint{t, t / 3600 * price})
		}
		rep.Cost = append(rep.Cost, seriesPoint{rep.TotalS, rep.CostUSD})
	}
	for _, d := range j.Decisions {
		if d.PredictedUSD > 0 {
			t := d.Time.Sub(start).Seconds()
			rep.PredictedCost = append(rep.PredictedCost, seriesPoint{t, t/3600*price + d.PredictedUSD})
		}
	}
	m0 := j.Config.GlobalBatch
	if len(j.Attempts) > 0 {
		m0 = j.Attempts[0].Config.GlobalBatch
	}
	rep.Noise = noiseSeries(recs, float64(m0), float64(start.UnixNano())/1e9, maxNoisePoints)
	return rep
}

// maxNoisePoints bounds the noise series of a report; noiseWarmup is the
// number of samples the estimate averages before the series shows it.
const (
	maxNoisePoints = 300
	noiseWarmup    = 10
)

// noiseSeries estimates the gradient noise scale along rank 0's steps with
// the controller's estimator (gns.Estimator over each step's local and
// averaged squared norms, base batch m0; the controller averages a window of
// steps first, so its estimate is smoother) and returns at most n points of it,
// at seconds since t0, once the estimate averages noiseWarmup samples.
// Steps without norms, or with a single gradient, are skipped.
func noiseSeries(recs []telemetry.StepRecord, m0, t0 float64, n int) []seriesPoint {
	if m0 <= 0 || n <= 0 {
		return nil
	}
	rs := make([]telemetry.StepRecord, 0, len(recs))
	for _, r := range recs {
		if r.Rank == 0 && r.LocalSqr != nil && r.AvgSqr != nil && r.LocalBatch > 0 {
			rs = append(rs, r)
		}
	}
	sort.SliceStable(rs, func(a, b int) bool { return rs[a].Step < rs[b].Step })
	var (
		est gns.Estimator
		all []seriesPoint
	)
	for _, r := range rs {
		s, _ := gradSample(r, m0)
		next, err := est.Update(s)
		if err != nil {
			continue
		}
		est = next
		if est.Steps() < noiseWarmup {
			continue // the first samples since a reset are too few to read
		}
		if v := est.NoiseScale(m0); !math.IsInf(v, 0) && !math.IsNaN(v) {
			all = append(all, seriesPoint{r.Time - t0, v})
		}
	}
	if len(all) <= n {
		return all
	}
	out := make([]seriesPoint, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, all[i*(len(all)-1)/(n-1)])
	}
	return out
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

// gradSample is a step record's gradient statistics as a noise-scale
// sample, with m0 the per-worker batch scale is measured against; ok is
// false when the record has none.
func gradSample(r telemetry.StepRecord, m0 float64) (s gns.Sample, ok bool) {
	if r.LocalSqr == nil || r.AvgSqr == nil || r.LocalBatch <= 0 || m0 <= 0 {
		return gns.Sample{}, false
	}
	count := float64(r.World)
	if r.Count > 0 {
		count = float64(r.Count)
	}
	return gns.Sample{LocalSqr: *r.LocalSqr, TotalSqr: *r.AvgSqr, Count: count, Scale: count * float64(r.LocalBatch) / m0, Biased: r.Biased}, true
}
