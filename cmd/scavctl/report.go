package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/report"
	"github.com/scavenger-ml/scavenger/telemetry"
)

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
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := reportFormat(format, a.output, cmd.Flags().Changed("output"))
			if err != nil {
				return err
			}
			return a.withJob(cmd, args[0], true, func(ctx context.Context, c *api.Client, j api.Job) error {
				rep, err := buildReport(ctx, c, j, f != "text", time.Now())
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

// buildReport makes job j's report. The text needs each attempt's
// measured step time only: the daemon's digest of the job's step records
// has it. The figures and JSON draw series along the job (noise,
// throughput, loss): series reads rank 0's step records for them.
func buildReport(ctx context.Context, c *api.Client, j api.Job, series bool, now time.Time) (report.JobReport, error) {
	if !series {
		agg, err := stepAggregate(ctx, c, j.ID)
		if err != nil {
			return report.JobReport{}, err
		}
		return report.MakeFrom(j, agg.AttemptStepS(), now), nil
	}
	var recs []telemetry.StepRecord
	err := c.Steps(ctx, j.ID, false, func(r telemetry.StepRecord) error {
		if r.Rank == 0 && r.IsStep() {
			recs = append(recs, r)
		}
		return nil
	})
	if err != nil {
		return report.JobReport{}, fmt.Errorf("read steps of %s: %w", j.ID, err)
	}
	return report.Make(j, recs, now), nil
}
