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

func newStatusCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status JOB",
		Short: "Show one job's record and its latest step",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			return a.withClient(cmd.Context(), func(ctx context.Context, c *daemon.Client) error {
				return a.showStatus(ctx, c, args[0], asJSON)
			})
		},
	}
	addOutputFlag(a, cmd)
	return cmd
}

func (a *app) showStatus(ctx context.Context, c *daemon.Client, id string, asJSON bool) error {
	j, err := c.Job(ctx, id)
	if err != nil {
		return err
	}
	last, ok, err := c.LastStep(ctx, id)
	if err != nil {
		return err
	}
	if asJSON {
		out := struct {
			Job      daemon.Job `json:"job"`
			LastStep any        `json:"last_step"`
		}{Job: j}
		if ok {
			out.LastStep = last
		}
		return a.printJSON(out)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("Job", j.ID)
	row("State", string(j.State))
	if j.Message != "" {
		row("Message", j.Message)
	}
	row("Command", strings.Join(j.Command, " "))
	row("Directory", j.Dir)
	row("Workers", fmt.Sprint(j.Config.Workers))
	row("Global batch", batchText(j.Config.GlobalBatch))
	row("Node", j.Node+" ("+j.Launcher+" launcher)")
	row("Attempt", fmt.Sprint(j.Attempt))
	row("Checkpoints", j.CheckpointDir)
	row("Created", j.Created.Local().Format(time.DateTime))
	if j.Started != nil && j.Ended != nil {
		row("Ran for", j.Ended.Sub(*j.Started).Truncate(time.Millisecond).String())
	}
	row("Exit code", exitText(j.ExitCode))
	if ok {
		row("Last step", fmt.Sprintf("%d (rank %d of %d, %s)", last.Step, last.Rank, last.World,
			time.Unix(0, int64(last.Time*1e9)).Local().Format(time.TimeOnly)))
	} else {
		row("Last step", "none reported")
	}
	if err := tw.Flush(); err != nil || len(j.Attempts) < 2 {
		return err
	}
	fmt.Fprintln(a.stdout, "\nAttempts:")
	tw = tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tWORKERS\tBATCH\tSTEPS\tRAN\tENDED BY\tRELAUNCH (CKPT+EXIT+START+FIRST STEP)")
	for _, at := range j.Attempts {
		ran, move := "-", "-"
		if at.Ended != nil {
			ran = at.Ended.Sub(at.Started).Truncate(time.Millisecond).String()
		}
		if m := at.Move; m != nil {
			move = fmt.Sprintf("%.2fs = %.2f+%.2f+%.2f+%.2f", m.Checkpoint+m.Exit+m.Start+m.FirstStep, m.Checkpoint, m.Exit, m.Start, m.FirstStep)
		}
		steps := "-"
		if at.LastStep > 0 {
			steps = fmt.Sprintf("%d..%d", at.FirstStep, at.LastStep)
		}
		fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\t%s\t%s\n", at.Attempt, at.Config.Workers, batchText(at.Config.GlobalBatch), steps, ran, at.EndReason, move)
	}
	return tw.Flush()
}

func newStopCmd(a *app) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "stop JOB",
		Short: "Stop a running job: SIGTERM to its workers, SIGKILL after the grace period",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, release, err := a.connect(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer release()
			j, err := c.Stop(cmd.Context(), args[0], grace)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "scavctl: stopping %s\n", j.ID)
			return nil
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 0, "time between SIGTERM and SIGKILL (default: the job's own)")
	return cmd
}

func newMoveCmd(a *app) *cobra.Command {
	var workers, batch int
	cmd := &cobra.Command{
		Use:   "move JOB --workers N [--batch-size B]",
		Short: "Relaunch a running job at another configuration, by checkpoint and restart",
		Long: `move asks a running job to checkpoint and relaunches it with N workers and
global batch B. Scripts that use the python client checkpoint at a step
boundary chosen by the daemon; others need --checkpoint-signal on scavctl run.
It returns once the old workers have checkpointed and exited; if the new
configuration cannot start, the job goes back to the one it had.`,
		Example: "  scavctl move cnn-48b214 --workers 2 --batch-size 128",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, release, err := a.connect(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer release()
			j, err := c.Job(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			cfg := j.Config
			if cmd.Flags().Changed("workers") {
				cfg.Workers = workers
			}
			if cmd.Flags().Changed("batch-size") {
				cfg.GlobalBatch = batch
			}
			if cfg == j.Config {
				return fmt.Errorf("job %s already runs with %d workers and batch %s: give --workers or --batch-size", j.ID, cfg.Workers, batchText(cfg.GlobalBatch))
			}
			if _, err := c.Move(cmd.Context(), j.ID, cfg, "requested by scavctl move"); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "scavctl: %s checkpointed; relaunching with %d workers, batch %s\n", j.ID, cfg.Workers, batchText(cfg.GlobalBatch))
			return nil
		},
	}
	cmd.Flags().IntVarP(&workers, "workers", "w", 0, "workers of the new configuration")
	cmd.Flags().IntVarP(&batch, "batch-size", "b", 0, "global batch of the new configuration")
	return cmd
}

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print scavctl's version",
		Args:  cobra.NoArgs,
		Run:   func(*cobra.Command, []string) { fmt.Fprintln(a.stdout, "scavctl", daemon.Version) },
	}
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
