package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/spf13/cobra"
)

// hookBudget bounds a prolog or epilog hook from start to exit: Slurm waits
// for it before it starts (or releases) the job.
const hookBudget = 80 * time.Millisecond

func newSlurmCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "slurm",
		Short: "Slurm integration: the prolog and epilog hooks, and the allocations they reported",
		Long: `Slurm runs "scavctl slurm prolog" on every node of an allocation before the job
starts and "scavctl slurm epilog" after it ends (see deploy/slurm/). The hooks tell
the node's scavd, so that the jobs "scavctl run" starts inside the allocation are
tied to the Slurm job id, and jobs still running when it ends are stopped.

The hooks fail open: whatever goes wrong (no scavd, a slow one, a bad
environment), they say so on stderr and in --log, and exit 0, because a failing
prolog drains the node.`,
	}
	cmd.AddCommand(newHookCmd(a, "prolog", api.AllocationBegin), newHookCmd(a, "epilog", api.AllocationEnd), newAllocationsCmd(a))
	return cmd
}

func newHookCmd(a *app, name, event string) *cobra.Command {
	var logFile string
	budget := hookBudget
	cmd := &cobra.Command{
		Use:   name,
		Short: fmt.Sprintf("Slurm %s hook: report the allocation in $SLURM_JOB_ID to this node's scavd (always exits 0)", name),
		Long: fmt.Sprintf(`%s reads the allocation from Slurm's hook environment (SLURM_JOB_ID,
SLURM_JOB_USER, SLURM_JOB_UID, SLURM_JOB_PARTITION, SLURM_JOB_NODELIST) and
reports it to the scavd of this node, found as every scavctl command finds it
but without starting one. It gives up after --timeout and always exits 0.`, name),
		Example: fmt.Sprintf("  # slurm.conf\n  %s=/etc/slurm/scavenger-%s.sh\n  # the script\n  exec /usr/local/bin/scavctl slurm %s --log /var/log/scavenger/slurm-hooks.log",
			map[string]string{"prolog": "Prolog", "epilog": "Epilog"}[name], name, name),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), budget)
			defer cancel()
			msg, err := reportAllocation(ctx, a, event)
			if err != nil {
				msg = fmt.Sprintf("ignored (a failing hook would drain the node): %v", err)
				fmt.Fprintf(a.stderr, "scavctl slurm %s: %s\n", name, msg)
			}
			if logFile != "" {
				appendLog(logFile, fmt.Sprintf("%s slurm %s job %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), name, os.Getenv("SLURM_JOB_ID"), msg), a.stderr)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&logFile, "log", "", "append one line per run to this file (Slurm discards a hook's output)")
	cmd.Flags().DurationVar(&budget, "timeout", hookBudget, "give up reaching scavd after this long")
	return cmd
}

// reportAllocation sends the hook's event to the node's daemon and says what
// it recorded.
func reportAllocation(ctx context.Context, a *app, event string) (string, error) {
	id := os.Getenv("SLURM_JOB_ID")
	if id == "" {
		return "", errors.New("SLURM_JOB_ID is not set: run this from Slurm's Prolog/Epilog")
	}
	alloc := api.Allocation{Scheduler: "slurm", ID: id, User: os.Getenv("SLURM_JOB_USER"),
		Partition: os.Getenv("SLURM_JOB_PARTITION"), Nodes: os.Getenv("SLURM_JOB_NODELIST")}
	if uid, err := strconv.Atoi(os.Getenv("SLURM_JOB_UID")); err == nil {
		alloc.UID = uid
	}
	c, err := a.findDaemon(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close()
	rec, err := c.ReportAllocation(ctx, api.AllocationEvent{Event: event, Allocation: alloc})
	if err != nil {
		return "", fmt.Errorf("report allocation slurm.%s: %w", id, err)
	}
	if event == api.AllocationEnd && len(rec.Jobs) > 0 {
		return fmt.Sprintf("recorded the end of slurm.%s on %s; its jobs %v are stopped if still running", id, rec.Node, rec.Jobs), nil
	}
	return fmt.Sprintf("recorded the %s of slurm.%s on %s", event, id, rec.Node), nil
}

// findDaemon connects to a running daemon within ctx, trying the same places
// as connect, but never starts one and never waits past ctx.
func (a *app) findDaemon(ctx context.Context) (*api.Client, error) {
	deadline, _ := ctx.Deadline()
	if a.endpoint != "" {
		c, err := a.dialGiven(ctx, time.Until(deadline))
		if err != nil {
			return nil, fmt.Errorf("no scavd answered (%w)", err)
		}
		return c, nil
	}
	c, err := api.DialFirst(ctx, a.endpoints(), time.Until(deadline))
	if err != nil {
		return nil, fmt.Errorf("no scavd answered (%w)", err)
	}
	return c, nil
}

// appendLog appends line to path; a failure is reported on stderr only.
func appendLog(path, line string, stderr io.Writer) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o640)
	if err == nil {
		_, err = f.WriteString(line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "scavctl: write hook log: %v\n", err)
	}
}

func newAllocationsCmd(a *app) *cobra.Command {
	return newListCmd(a, &cobra.Command{
		Use:   "allocations",
		Short: "List the Slurm allocations this node's hooks reported, newest first, with their Scavenger jobs",
	}, (*api.Client).Allocations, "ALLOCATION\tUSER\tPARTITION\tNODES\tSTARTED\tENDED\tJOBS", func(al api.Allocation) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%d", al.Key(), dash(al.User), dash(al.Partition), dash(al.Nodes),
			timeText(al.Started), timeText(al.Ended), len(al.Jobs))
	})
}

func timeText(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}
