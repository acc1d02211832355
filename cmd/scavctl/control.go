package main

import (
	"context"
	"fmt"
	"time"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/spf13/cobra"
)

func newStopCmd(a *app) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:               "stop JOB",
		Short:             "Stop a running job: SIGTERM to its workers, SIGKILL after the grace period",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if grace < 0 || grace > api.MaxGrace {
				return fmt.Errorf("--grace %s: use 0 (the job's own) to %s", grace, api.MaxGrace)
			}
			return a.withJob(cmd, args[0], false, func(ctx context.Context, c *api.Client, j api.Job) error {
				j, err := c.Stop(ctx, j.ID, grace)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stderr, "scavctl: stopping %s\n", j.ID)
				return nil
			})
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
		Example:           "  scavctl move cnn-48b214 --workers 2 --batch-size 128",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withJob(cmd, args[0], false, func(ctx context.Context, c *api.Client, j api.Job) error {
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
				moved, err := c.Move(ctx, j.ID, cfg, "requested by scavctl move")
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stderr, "scavctl: %s %s; relaunching with %d workers, batch %s\n", j.ID, movedFrom(moved), cfg.Workers, batchText(cfg.GlobalBatch))
				return nil
			})
		},
	}
	cmd.Flags().IntVarP(&workers, "workers", "w", 0, "workers of the new configuration")
	cmd.Flags().IntVarP(&batch, "batch-size", "b", 0, "global batch of the new configuration")
	return cmd
}

// movedFrom says where a moved job goes on from: the checkpoint it wrote for
// the move, or, when its workers did not write one in time, its last
// complete checkpoint before that.
func movedFrom(j api.Job) string {
	for i := len(j.Attempts) - 1; i >= 0; i-- {
		if m := j.Attempts[i].Move; m != nil {
			if m.Fallback {
				return "did not checkpoint within its grace: it goes on from its last complete checkpoint"
			}
			break
		}
	}
	return "checkpointed"
}
