package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/words"

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
	var pin, unpin bool
	cmd := &cobra.Command{
		Use:   "move JOB [--workers N] [--batch-size B] [--pin | --unpin]",
		Short: "Relaunch a running job at another configuration, by checkpoint and restart; pin it there",
		Long: `move asks a running job to checkpoint and relaunches it with N workers and
global batch B. Scripts that use the python client checkpoint at a step
boundary chosen by the daemon; others need --checkpoint-signal on scavctl run.
It returns once the old workers have checkpointed and exited; if the new
configuration cannot start, the job goes back to the one it had.

A job under a policy (scavctl run --policy) may be moved again by it, at its
next decision. --pin keeps the job at the configuration (the new one, or
with neither --workers nor --batch-size the one it runs at): its policy goes
on deciding, but moves it no more until move --unpin.`,
		Example: `  scavctl move cnn-48b214 --workers 2 --batch-size 128
  scavctl move cnn-48b214 --workers 2 --pin
  scavctl move cnn-48b214 --unpin`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if pin && unpin {
				return errors.New("give --pin or --unpin, not both")
			}
			return a.withJob(cmd, args[0], false, func(ctx context.Context, c *api.Client, j api.Job) error {
				cfg := j.Config
				if cmd.Flags().Changed("workers") {
					cfg.Workers = workers
				}
				if cmd.Flags().Changed("batch-size") {
					cfg.GlobalBatch = batch
				}
				moves := cfg != j.Config
				if !moves && !pin && !unpin {
					return fmt.Errorf("job %s already runs at %s: give --workers or --batch-size (or --pin to keep it there)", j.ID, words.Config(cfg))
				}
				var moved api.Job
				var err error
				if pin || unpin {
					moved, err = c.Pin(ctx, j.ID, cfg, "requested by scavctl move", pin)
				} else {
					moved, err = c.Move(ctx, j.ID, cfg, "requested by scavctl move")
				}
				if err != nil {
					return err
				}
				msg := j.ID
				if moves {
					msg += fmt.Sprintf(" %s; relaunching at %s", movedFrom(moved), words.Config(cfg))
				}
				fmt.Fprintf(a.stderr, "scavctl: %s%s\n", msg, pinText(moved, pin || unpin))
				return nil
			})
		},
	}
	cmd.Flags().IntVarP(&workers, "workers", "w", 0, "workers of the new configuration")
	cmd.Flags().IntVarP(&batch, "batch-size", "b", 0, "global batch of the new configuration")
	cmd.Flags().BoolVar(&pin, "pin", false, "keep the job at this configuration: its policy moves it no more until --unpin")
	cmd.Flags().BoolVar(&unpin, "unpin", false, "let the job's policy move it again")
	return cmd
}

// pinText says what j's policy may do now that it was moved by hand:
// pinned (changed: by this command) or not, and with a policy that moves
// jobs, that it may move it again.
func pinText(j api.Job, changed bool) string {
	moving := j.Optimize.Policy != "" && j.Optimize.Policy != "fixed"
	switch {
	case j.Pinned:
		return fmt.Sprintf("; pinned there: its policy moves it no more until scavctl move %s --unpin", j.ID)
	case changed && moving:
		return fmt.Sprintf("; unpinned: its policy (%s) may move it again", j.Optimize.Policy)
	case changed:
		return "; unpinned"
	case moving:
		return fmt.Sprintf("; its policy (%s) may move it again at its next decision (scavctl move %s --pin keeps it here)", j.Optimize.Policy, j.ID)
	}
	return ""
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
