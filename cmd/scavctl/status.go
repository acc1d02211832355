package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/words"

	"github.com/spf13/cobra"
)

func newStatusCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:               "status [JOB]",
		Short:             "Show one job's record and its latest step, or, with no JOB, the daemon's",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			if len(args) == 0 {
				return a.withClient(cmd.Context(), func(ctx context.Context, c *api.Client) error {
					return a.showDaemon(ctx, c, asJSON)
				})
			}
			return a.withJob(cmd, args[0], true, func(ctx context.Context, c *api.Client, j api.Job) error {
				return a.showStatus(ctx, c, j, asJSON)
			})
		},
	}
	addOutputFlag(a, cmd)
	return cmd
}

// showDaemon prints the daemon's own state: its node, version, jobs and
// what is wrong with it (a full state disk).
func (a *app) showDaemon(ctx context.Context, c *api.Client, asJSON bool) error {
	info, err := c.Ping(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return a.printJSON(info)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("Node", info.Node)
	row("Version", info.Version)
	row("PID", fmt.Sprint(info.PID))
	row("API", info.API)
	row("Running jobs", fmt.Sprintf("%d %s", len(info.Active), strings.Join(info.Active, " ")))
	disk := "ok"
	if info.StateDisk != "" {
		disk = info.StateDisk
	}
	row("State disk", disk)
	for _, c := range info.CheckpointDisks {
		row("Checkpoint disk", c)
	}
	store := []string{"ok"}
	if len(info.Store) > 0 {
		store = info.Store
	}
	for _, s := range store {
		row("Store", s)
	}
	return tw.Flush()
}

// warnDaemon tells, on stderr, what is wrong with the daemon (a full state
// disk: what a job's record says may be behind; a checkpoint directory
// short of space; damage it found in its store when it started).
func (a *app) warnDaemon(ctx context.Context, c *api.Client) {
	info, err := c.Ping(ctx)
	if err != nil {
		return
	}
	for _, w := range append(append([]string{info.StateDisk}, info.CheckpointDisks...), info.Store...) {
		if w != "" {
			fmt.Fprintf(a.stderr, "scavctl: warning: scavd on %s: %s\n", info.Node, w)
		}
	}
}

func (a *app) showStatus(ctx context.Context, c *api.Client, j api.Job, asJSON bool) error {
	a.warnDaemon(ctx, c)
	last, ok, err := c.LastStep(ctx, j.ID)
	if err != nil {
		return err
	}
	if asJSON {
		out := struct {
			Job      api.Job `json:"job"`
			LastStep any     `json:"last_step"`
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
	if st := j.Stalled; st != nil {
		row("Stalled", fmt.Sprintf("no step since %s (step %d; stall timeout %s)", st.Since.Local().Format(time.TimeOnly), st.Step, st.Timeout.D()))
	}
	if b := j.BadLoss; b != nil {
		row("Loss", fmt.Sprintf("turned %s at step %d (attempt %d)", b.Value, b.Step, b.Attempt))
	}
	if j.Phase != "" {
		row("Phase", string(j.Phase))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := len(j.Decisions); n > 0 {
		fmt.Fprintln(a.stdout, "\nDecisions (latest last):")
		for _, d := range j.Decisions[max(0, n-5):] {
			fmt.Fprintf(a.stdout, "  step %d (%s, %s -> %s): %s\n", d.Step, d.Phase,
				words.ConfigNotation(d.From), words.ConfigNotation(d.To), words.Said(d, j.ShowsCost()))
		}
	}
	if len(j.Attempts) < 2 {
		return nil
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
