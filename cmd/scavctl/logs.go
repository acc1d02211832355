package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/stepstats"
	"github.com/scavenger-ml/scavenger/telemetry"
)

var errFinished = errors.New("job finished")

func newLogsCmd(a *app) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs JOB",
		Short: "Print a job's worker output, prefixed by rank",
		Long: `logs prints what the job's workers wrote, each line prefixed by the worker's
rank (stderr lines go to stderr). A job's history keeps its first 2000 lines
and its newest 4000; logs says where lines are missing. With -f it keeps
printing until the job ends; with -o json it prints one JSON object per line
(attempt, rank, stream, line, t, n: the line's number in the job's output).`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withJobOutput(cmd, args[0], func(ctx context.Context, c *api.Client, j api.Job, asJSON bool) error {
				con := newConsole(a.stdout, a.stderr, 0)
				enc := json.NewEncoder(a.stdout)
				var last int64 // the number of the last line printed
				err := c.Output(ctx, j.ID, follow, func(l *telemetry.LogLine, e *telemetry.Event) error {
					switch {
					case l != nil && asJSON:
						return enc.Encode(l)
					case l != nil && l.Stream == "scavd": // the daemon's own note: it says what it left out
						con.notef("%s", l.Line)
						last = 0
					case l != nil:
						if gap := l.N - last - 1; last > 0 && gap > 0 {
							con.notef("%d lines of output not kept here: a job's history keeps its first lines and its newest", gap)
						}
						last = l.N
						con.workerLine(l.Rank, l.Stream == string(plugins.Stderr), l.Line)
					case follow && e.Kind == telemetry.EventFinished:
						if end, err := jobEnds(ctx, c, e); err != nil || !end {
							return err
						}
						return errFinished
					}
					return nil
				})
				if errors.Is(err, errFinished) {
					return nil
				}
				return err
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output until the job ends")
	addOutputFlag(a, cmd)
	return cmd
}

func newStepsCmd(a *app) *cobra.Command {
	var follow, summary bool
	cmd := &cobra.Command{
		Use:   "steps JOB",
		Short: "Print a job's step records",
		Long: `steps prints the step telemetry of every worker: step time, samples, compute and
synchronisation seconds, loss, and the squared gradient norms (local, before
all-reduce; averaged, after it) that feed the gradient noise scale. With -o json
it prints one JSON record per line, as the workers sent them. With --summary it
prints what they add up to: median step time, samples/s, the compute/all-reduce
split, the loss, and the gradient noise (γ, γ/K and the noise scale B_simple).`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withJobOutput(cmd, args[0], func(ctx context.Context, c *api.Client, j api.Job, asJSON bool) error {
				if summary {
					var recs []telemetry.StepRecord
					if err := c.Steps(ctx, j.ID, false, func(r telemetry.StepRecord) error { recs = append(recs, r); return nil }); err != nil {
						return err
					}
					if asJSON {
						return a.printJSON(stepstats.Summarize(recs))
					}
					return printSummary(a.stdout, stepstats.Summarize(recs))
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
				if !asJSON {
					fmt.Fprintln(tw, "STEP\tRANK\tWORLD\tDT_S\tSAMPLES\tCOMPUTE_S\tSYNC_S\tLOSS\tLOCAL_SQR\tAVG_SQR\t")
				}
				enc := json.NewEncoder(a.stdout)
				err := c.Steps(ctx, j.ID, follow, func(r telemetry.StepRecord) error {
					if asJSON {
						return enc.Encode(r)
					}
					fmt.Fprintf(tw, "%d\t%d\t%d\t%.4f\t%d\t%s\t%s\t%s\t%s\t%s\t\n", r.Step, r.Rank, r.World, r.Seconds, r.Samples,
						num(r.ComputeSeconds, "%.4f"), num(r.SyncSeconds, "%.4f"), num(r.Loss, "%.4f"), num(r.LocalSqr, "%.4g"), num(r.AvgSqr, "%.4g"))
					if follow {
						return tw.Flush()
					}
					return nil
				})
				if ferr := tw.Flush(); err == nil {
					err = ferr
				}
				return err
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new records (Ctrl-C to stop)")
	cmd.Flags().BoolVar(&summary, "summary", false, "print a summary instead: throughput, time split, loss, gradient noise")
	addOutputFlag(a, cmd)
	return cmd
}

func num(p *float64, format string) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf(format, *p)
}
