package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

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
	var (
		follow, summary bool
		last            int
		since           string
	)
	cmd := &cobra.Command{
		Use:   "steps JOB",
		Short: "Print a job's step records",
		Long: `steps prints the step telemetry of every worker: step time, samples, compute and
synchronisation seconds, loss, and the squared gradient norms (local, before
all-reduce; averaged, after it) that feed the gradient noise scale. With -o json
it prints one JSON record per line, as the workers sent them. --last N prints
only the newest N records and --since those stored since a time (a duration
ago, or a time); the daemon reads no more of the history than that. With
--summary it prints what they add up to: median step time, samples/s, the
compute/all-reduce split, the loss, and the gradient noise (γ, γ/K and the
noise scale B_simple), from the daemon's running digest of the job's records
(the median within 0.3%).`,
		Example:           "  scavctl steps train-1a2b3c --last 20\n  scavctl steps train-1a2b3c --since 10m -f\n  scavctl steps train-1a2b3c --summary",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var r api.StepRange
			if last < 0 {
				return fmt.Errorf("--last %d: give a count of records, 1 or more", last)
			}
			r.Last = last
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return err
				}
				r.Since = t
			}
			return a.withJobOutput(cmd, args[0], func(ctx context.Context, c *api.Client, j api.Job, asJSON bool) error {
				if summary {
					return a.printStepSummary(ctx, c, j.ID, asJSON)
				}
				return a.printSteps(ctx, c, j.ID, r, follow, asJSON)
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new records (Ctrl-C to stop)")
	cmd.Flags().BoolVar(&summary, "summary", false, "print a summary instead: throughput, time split, loss, gradient noise")
	cmd.Flags().IntVar(&last, "last", 0, "print only the newest N records")
	cmd.Flags().StringVar(&since, "since", "", "print only the records stored since: a duration ago (10m, 2h) or a time (2026-11-29T10:00:00Z)")
	addOutputFlag(a, cmd)
	return cmd
}

// printStepSummary prints the summary of job's step records, from the
// daemon's digest of them.
func (a *app) printStepSummary(ctx context.Context, c *api.Client, job string, asJSON bool) error {
	agg, err := stepAggregate(ctx, c, job)
	if err != nil {
		return err
	}
	if asJSON {
		return a.printJSON(agg.Summary())
	}
	return printSummary(a.stdout, agg.Summary())
}

// stepAggregate reads what job's step records add up to.
func stepAggregate(ctx context.Context, c *api.Client, job string) (stepstats.Aggregate, error) {
	d, err := c.StepDigest(ctx, job)
	if err != nil {
		return stepstats.Aggregate{}, fmt.Errorf("read the step digest of %s: %w", job, err)
	}
	var agg stepstats.Aggregate
	if err := json.Unmarshal(d.Aggregate, &agg); err != nil {
		return agg, fmt.Errorf("decode the step digest of %s: %w", job, err)
	}
	return agg, nil
}

// printSteps prints job's step records in r, one a line: as JSON, or as a
// table whose columns have fixed widths, so that no record waits for the
// last to be laid out (a wider value shifts its own line only).
func (a *app) printSteps(ctx context.Context, c *api.Client, job string, r api.StepRange, follow, asJSON bool) error {
	w := bufio.NewWriterSize(a.stdout, 64<<10)
	enc := json.NewEncoder(w)
	var line []byte
	if !asJSON {
		line = stepRow(line[:0], nil)
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	err := c.StepsIn(ctx, job, r, follow, func(rec telemetry.StepRecord) error {
		var err error
		if asJSON {
			err = enc.Encode(rec)
		} else {
			line = stepRow(line[:0], &rec)
			_, err = w.Write(line)
		}
		if err == nil && follow {
			err = w.Flush()
		}
		return err
	})
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	return err
}

// stepColumns are the step table's header and its columns' widths.
var stepColumns = []struct {
	name  string
	width int
}{{"STEP", 8}, {"RANK", 4}, {"WORLD", 5}, {"DT_S", 8}, {"SAMPLES", 7}, {"COMPUTE_S", 9}, {"SYNC_S", 8}, {"LOSS", 8}, {"LOCAL_SQR", 10}, {"AVG_SQR", 10}}

// stepRow appends a line of the step table: the header (rec nil) or rec's
// values, each right-aligned in its column.
func stepRow(b []byte, rec *telemetry.StepRecord) []byte {
	var cells [10][]byte
	var buf [10][32]byte
	if rec == nil {
		for i, c := range stepColumns {
			cells[i] = append(buf[i][:0], c.name...)
		}
	} else {
		cells[0] = strconv.AppendInt(buf[0][:0], rec.Step, 10)
		cells[1] = strconv.AppendInt(buf[1][:0], int64(rec.Rank), 10)
		cells[2] = strconv.AppendInt(buf[2][:0], int64(rec.World), 10)
		cells[3] = strconv.AppendFloat(buf[3][:0], rec.Seconds, 'f', 4, 64)
		cells[4] = strconv.AppendInt(buf[4][:0], int64(rec.Samples), 10)
		cells[5] = appendNum(buf[5][:0], rec.ComputeSeconds, 'f', 4)
		cells[6] = appendNum(buf[6][:0], rec.SyncSeconds, 'f', 4)
		cells[7] = appendNum(buf[7][:0], rec.Loss, 'f', 4)
		cells[8] = appendNum(buf[8][:0], rec.LocalSqr, 'g', 4)
		cells[9] = appendNum(buf[9][:0], rec.AvgSqr, 'g', 4)
	}
	for i, c := range stepColumns {
		if i > 0 {
			b = append(b, ' ', ' ')
		}
		for n := len(cells[i]); n < c.width; n++ {
			b = append(b, ' ')
		}
		b = append(b, cells[i]...)
	}
	return append(b, '\n')
}

// appendNum appends an optional number ("-" when absent).
func appendNum(b []byte, p *float64, format byte, prec int) []byte {
	if p == nil {
		return append(b, '-')
	}
	return strconv.AppendFloat(b, *p, format, prec, 64)
}
