package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/daemon"
)

func newJobsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List jobs, oldest first",
		Long:  "jobs lists every job the daemon has a record of: its id, state, configuration and exit code.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			return a.withClient(cmd.Context(), func(ctx context.Context, c *daemon.Client) error {
				jobs, err := c.Jobs(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return a.printJSON(jobs)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATE\tWORKERS\tBATCH\tEXIT\tAGE\tCOMMAND")
				for _, j := range jobs {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", j.ID, j.State, j.Config.Workers, batchText(j.Config.GlobalBatch),
						exitText(j.ExitCode), age(j.Created), truncate(strings.Join(j.Command, " "), 60))
				}
				return tw.Flush()
			})
		},
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

func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
