package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/api"
)

func newAttachCmd(a *app) *cobra.Command {
	var tick time.Duration
	cmd := &cobra.Command{
		Use:   "attach JOB",
		Short: "Follow a running job as run does: its output, a status line, its end; Ctrl-C detaches",
		Long: `attach prints a job's output from its first attempt on and follows it, with
run's status line, until the job ends, and exits as run would (see scavctl run
--help). Ctrl-C detaches: the job goes on, and attach exits 0.`,
		Example:           "  scavctl run -d --name train -- python train.py\n  scavctl attach train",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			sigs := make(chan os.Signal, 2)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)
			return a.withJob(cmd, args[0], false, func(ctx context.Context, c *api.Client, j api.Job) error {
				return a.watchJob(ctx, c, j, 1, watchOptions{tick: tick}, sigs)
			})
		},
	}
	cmd.Flags().DurationVar(&tick, "status-every", 10*time.Second, "interval of the plain status lines when stderr is not a terminal (0: none)")
	return cmd
}
