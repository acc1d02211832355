package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/api"
)

// costRow is one line of scavctl cost.
type costRow struct {
	Job             string  `json:"job"`
	State           string  `json:"state"`
	Launcher        string  `json:"launcher"`
	Started         string  `json:"started,omitempty"`
	DurationS       float64 `json:"duration_s"`
	Attempts        int     `json:"attempts"`
	Instances       int     `json:"instances"`
	InstanceSeconds float64 `json:"instance_s"`
	BilledSeconds   float64 `json:"billed_s"`
	USD             float64 `json:"usd"`
}

func newCostCmd(a *app) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "cost",
		Short: "List what every job's machines cost (launcher cloudvm)",
		Long: `cost lists, for every job whose launcher acquired its machines (cloudvm), how
long it ran, its attempts, the instances it used, their instance-seconds and
the seconds billed for them (the provider's granularity and minimum applied),
and the dollars billed, then the total. With --all, jobs on launchers that bill
nothing are listed too, at $0.`,
		Example: "  scavctl cost\n  scavctl cost -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			return a.withDaemon(cmd.Context(), func(ctx context.Context, c *api.Client) error {
				jobs, err := c.Jobs(ctx)
				if err != nil {
					return err
				}
				rows := costRows(jobs, all, time.Now())
				if asJSON {
					return a.printJSON(rows)
				}
				return writeCostTable(a.stdout, rows)
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "list the jobs whose machines were not billed too")
	addOutputFlag(a, cmd)
	return cmd
}

// costRows are the jobs' costs, oldest first.
func costRows(jobs []api.Job, all bool, now time.Time) []costRow {
	var rows []costRow
	for _, j := range jobs {
		if j.Cost == nil && !all {
			continue
		}
		r := costRow{Job: j.ID, State: string(j.State), Launcher: j.Launcher, Attempts: len(j.Attempts)}
		if j.Started != nil {
			end := now
			if j.Ended != nil {
				end = *j.Ended
			}
			r.Started, r.DurationS = j.Started.Local().Format("2006-01-02 15:04"), end.Sub(*j.Started).Seconds()
		}
		if c := j.Cost; c != nil {
			r.InstanceSeconds, r.BilledSeconds, r.USD = c.InstanceSeconds, c.BilledSeconds, c.USD
			seen := map[string]bool{}
			for _, a := range j.Attempts {
				if a.Cost != nil {
					for _, in := range a.Cost.Instances {
						seen[in.ID] = true
					}
				}
			}
			r.Instances = len(seen)
		}
		rows = append(rows, r)
	}
	return rows
}

func writeCostTable(w io.Writer, rows []costRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tLAUNCHER\tSTARTED\tDURATION\tATTEMPTS\tINSTANCES\tINSTANCE-H\tBILLED-H\tUSD")
	var total, hours float64
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%.4f\t%.4f\t%.4f\n", r.Job, r.State, r.Launcher, r.Started,
			time.Duration(r.DurationS*float64(time.Second)).Round(time.Second), r.Attempts, r.Instances, r.InstanceSeconds/3600, r.BilledSeconds/3600, r.USD)
		total += r.USD
		hours += r.BilledSeconds / 3600
	}
	fmt.Fprintf(tw, "TOTAL\t\t\t\t\t\t\t\t%.4f\t%.4f\n", hours, total)
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write cost table: %w", err)
	}
	return nil
}
