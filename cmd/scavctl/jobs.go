package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/report"
)

func newJobsCmd(a *app) *cobra.Command {
	var (
		all         bool
		state, name string
	)
	fetch := func(c *api.Client, ctx context.Context) ([]api.Job, error) {
		list := c.Jobs
		if all {
			list = c.AllJobs
		}
		jobs, err := list(ctx)
		out := jobs[:0]
		for _, j := range jobs {
			if report.MatchJob(j, state, name) {
				out = append(out, j)
			}
		}
		return out, err
	}
	cmd := newListCmd(a, &cobra.Command{
		Use:   "jobs",
		Short: "List your jobs, oldest first",
		Long: `jobs lists the jobs of yours the daemon has a record of: id, name, owner,
state, configuration and exit code. Root lists every user's with --all.`,
		Example: "  scavctl jobs --state running\n  scavctl jobs --name train -o json",
	}, fetch, "ID\tNAME\tUSER\tSTATE\tWORKERS\tBATCH\tEXIT\tAGE\tCOMMAND", func(j api.Job) string {
		user := "root"
		if j.Owner != nil {
			user = j.Owner.User
		}
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s", j.ID, j.Name, user, j.State, j.Config.Workers, batchText(j.Config.GlobalBatch),
			exitText(j.ExitCode), report.AgeText(time.Since(j.Created)), truncate(strings.Join(j.Command, " "), 60))
	})
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if !slices.Contains(jobStates, state) {
			return fmt.Errorf("--state %q: use %s", state, strings.Join(jobStates[1:], ", "))
		}
		return nil
	}
	cmd.Flags().BoolVar(&all, "all", false, "every user's jobs (root only)")
	cmd.Flags().StringVar(&state, "state", "", "only jobs in this state: starting, running, stopping, succeeded, failed, stopped, or active (not ended)")
	cmd.Flags().StringVar(&name, "name", "", "only jobs of this name")
	return cmd
}

// jobStates are what jobs --state takes ("" for all).
var jobStates = []string{"", string(api.StateStarting), string(api.StateRunning), string(api.StateStopping), string(api.StateSucceeded),
	string(api.StateFailed), string(api.StateStopped), "active"}

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
