package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/report"
)

// defaultJobsLimit is how many jobs `scavctl jobs` lists unless told.
const defaultJobsLimit = 100

func newJobsCmd(a *app) *cobra.Command {
	var (
		req   api.JobsRequest
		since string
	)
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List your jobs, oldest first",
		Long: `jobs lists the jobs of yours the daemon has a record of: id, name, owner,
state, configuration and exit code; the newest 100 unless --limit says
otherwise (0: every one), oldest first. --before JOB lists the page before
that job; jobs says, on standard error, how many older ones it left out and
how to see them. Root lists every user's with --all (--user narrows it).
With -o json it prints the jobs' whole records.

A node keeps the jobs that ended for job_retention (90 days) and at most
job_history (10,000) jobs (scavd's settings); scavctl keep JOB exempts one.`,
		Example: "  scavctl jobs --state running\n  scavctl jobs --name train -o json\n  scavctl jobs --since 24h --limit 0\n  scavctl jobs --before train-1a2b3c",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return err
				}
				req.Since = &t
			}
			req.Records = asJSON
			return a.withClient(cmd.Context(), func(ctx context.Context, c *api.Client) error {
				p, err := c.List(ctx, req)
				if err != nil {
					return err
				}
				if p.More > 0 {
					what := "jobs are"
					if p.More == 1 {
						what = "job is"
					}
					defer fmt.Fprintf(a.stderr, "scavctl: %d older %s not listed: --before %s lists the page before, --limit 0 every one\n", p.More, what, p.Before)
				}
				if asJSON {
					if p.Records == nil {
						p.Records = []api.Job{}
					}
					return a.printJSON(p.Records)
				}
				return writeJobs(a.stdout, p.Jobs, time.Now())
			})
		},
	}
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if !slices.Contains(jobStates, req.State) {
			return fmt.Errorf("--state %q: use %s", req.State, strings.Join(jobStates[1:], ", "))
		}
		return nil
	}
	addOutputFlag(a, cmd)
	f := cmd.Flags()
	f.BoolVar(&req.All, "all", false, "every user's jobs (root only)")
	f.StringVar(&req.State, "state", "", "only jobs in this state: starting, running, stopping, succeeded, failed, stopped; active (not ended) or ended")
	f.StringVar(&req.Name, "name", "", "only jobs of this name")
	f.StringVar(&req.User, "user", "", "with --all: only this user's jobs")
	f.StringVar(&since, "since", "", "only jobs created since: a duration ago (24h, 90m) or a time (2026-11-29, 2026-11-29T10:00:00Z)")
	f.StringVar(&req.Before, "before", "", "only jobs created before this job (its id): the page before it")
	f.IntVar(&req.Limit, "limit", defaultJobsLimit, "the most jobs to list, the newest (0: every one)")
	return cmd
}

// writeJobs writes a table of jobs.
func writeJobs(w io.Writer, jobs []api.JobSummary, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tUSER\tSTATE\tWORKERS\tBATCH\tEXIT\tAGE\tCOMMAND")
	for _, j := range jobs {
		user := "root"
		if j.Owner != nil {
			user = j.Owner.User
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", j.ID, j.Name, user, j.State, j.Config.Workers, batchText(j.Config.GlobalBatch),
			exitText(j.ExitCode), report.AgeText(now.Sub(j.Created)), truncate(strings.Join(j.Command, " "), 60))
	}
	return tw.Flush()
}

// parseSince reads --since: a duration before now, or a time (RFC 3339, or
// a date, or a date and a time of day in the local time zone).
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02", "2006-01-02 15:04", "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--since %q: give a duration ago (24h, 90m) or a time (2026-11-29, 2026-11-29T10:00:00Z)", s)
}

// jobStates are what jobs --state takes ("" for all).
var jobStates = []string{"", string(api.StateStarting), string(api.StateRunning), string(api.StateStopping), string(api.StateSucceeded),
	string(api.StateFailed), string(api.StateStopped), "active", "ended"}

// newListCmd completes cmd into a command that fetches a list from the
// daemon and prints it as a table (header, then one row per item) or, with
// -o json, as a JSON array.
func newListCmd[T any](a *app, cmd *cobra.Command, fetch func(*api.Client, context.Context) ([]T, error), header string, row func(T) string) *cobra.Command {
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		asJSON, err := a.json()
		if err != nil {
			return err
		}
		return a.withClient(cmd.Context(), func(ctx context.Context, c *api.Client) error {
			items, err := fetch(c, ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(items)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, header)
			for _, it := range items {
				fmt.Fprintln(tw, row(it))
			}
			return tw.Flush()
		})
	}
	addOutputFlag(a, cmd)
	return cmd
}

func exitText(code *int) string {
	if code == nil {
		return "-"
	}
	return fmt.Sprint(*code)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func newKeepCmd(a *app) *cobra.Command {
	var undo bool
	cmd := &cobra.Command{
		Use:   "keep JOB",
		Short: "Keep a job past the retention of finished jobs",
		Long: `keep exempts a job from the retention of finished jobs: a node drops the jobs
that ended more than job_retention ago (90 days), or past its job_history
(10,000 jobs), with their step records, output and events, but not a kept
one. --undo makes the job subject to retention again.`,
		Example:           "  scavctl keep train-1a2b3c\n  scavctl keep --undo train-1a2b3c",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withJob(cmd, args[0], true, func(ctx context.Context, c *api.Client, j api.Job) error {
				s, err := c.Keep(ctx, j.ID, undo)
				if err != nil {
					return err
				}
				if s.Kept {
					fmt.Fprintf(a.stdout, "job %s is kept: retention leaves it, its step records and output alone\n", j.ID)
				} else {
					fmt.Fprintf(a.stdout, "job %s is no longer kept: it goes with the retention of finished jobs\n", j.ID)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&undo, "undo", false, "no longer keep the job")
	return cmd
}
