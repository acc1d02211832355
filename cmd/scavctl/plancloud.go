package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/control"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/plugins"
)

// cloudPlanFlags are plan's flags for a dry run over a cloud launcher's
// offers (scavctl plan --launcher cloudvm): the job's bounds as scavctl run
// takes them.
type cloudPlanFlags struct {
	spot            bool
	maxPrice        float64
	workers, batch  string
	types           []string
	typesWereGiven  bool
	objectiveOfPlan string
	launcher        string
}

func (f *cloudPlanFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.launcher, "launcher", "", "cloudvm: a dry run over the offers of the scavd that runs launcher cloudvm (or one scavctl starts), instead of --trace")
	fl.BoolVar(&f.spot, "spot", false, "with --launcher cloudvm: price spot machines where offered")
	fl.Float64Var(&f.maxPrice, "max-price", 0, "with --launcher cloudvm: the most one machine may cost, $/hour (0: no cap)")
	fl.StringVar(&f.workers, "workers", "1", "with --launcher cloudvm: workers, N or MIN:MAX")
	fl.StringVar(&f.batch, "batch-size", "32", "with --launcher cloudvm: global batch size, N or MIN:MAX")
}

// cloudPlanRow is one candidate of a dry run: what it would buy and pay.
type cloudPlanRow struct {
	Type     string  `json:"type"`
	Market   string  `json:"market"`
	Machines int     `json:"machines"`
	Workers  int     `json:"workers"`
	Batch    int     `json:"batch"`
	USDHour  float64 `json:"usd_per_hour"`
	MinBill  float64 `json:"minimum_bill_usd"`
}

// planCloud lists the candidates of a job over the offers of the daemon's
// launcher now and what each would pay, before any machine is bought.
func (a *app) planCloud(ctx context.Context, f cloudPlanFlags, top int) error {
	asJSON, err := a.json()
	if err != nil {
		return err
	}
	minW, maxW, err := parseRange("--workers", f.workers)
	if err != nil {
		return err
	}
	minB, maxB, err := parseRange("--batch-size", f.batch)
	if err != nil {
		return err
	}
	if _, err := objective.ParseKind(f.objectiveOfPlan); err != nil {
		return fmt.Errorf("--objective: %w", err)
	}
	var offers api.Offers
	if err := a.withClient(ctx, func(ctx context.Context, c *api.Client) (err error) {
		offers, err = c.Offers(ctx)
		return err
	}); err != nil {
		return err
	}
	if len(offers.Offers) == 0 {
		return fmt.Errorf("launcher %s offers no machine types: plan --launcher cloudvm needs a scavd with launcher cloudvm", offers.Launcher)
	}
	opt := api.Optimize{Objective: f.objectiveOfPlan, MinWorkers: minW, MaxWorkers: maxW, MinBatch: minB, MaxBatch: maxB, Spot: f.spot,
		MaxPriceUSD: f.maxPrice, TargetSamples: int64(minB)} // a target only makes the space
	if f.typesWereGiven {
		opt.Types = f.types
	}
	cl, err := control.CloudSpec(opt, plugins.Config{Workers: minW, GlobalBatch: minB}, offers.Offers)
	if err != nil {
		return err
	}
	rows := cloudPlanRows(cl)
	if top > 0 && len(rows) > top {
		rows = rows[:top]
	}
	if asJSON {
		return a.printJSON(struct {
			Offers     []plugins.Offer `json:"offers"`
			Candidates []cloudPlanRow  `json:"candidates"`
		}{offers.Offers, rows})
	}
	return writeCloudPlan(a.stdout, offers.Offers, rows)
}

// cloudPlanRows are the candidates of cl with what they would pay, the
// cheapest an hour first (then the most workers).
func cloudPlanRows(cl control.Cloud) []cloudPlanRow {
	var rows []cloudPlanRow
	for _, c := range cl.Spec.Candidates {
		p := cl.Spec.Prices[c.Type]
		rows = append(rows, cloudPlanRow{Type: c.Type, Market: cl.Markets[c.Type], Machines: c.Nodes, Workers: c.Workers, Batch: c.Batch,
			USDHour: float64(c.Nodes) * p, MinBill: float64(c.Nodes) * p * cl.Spec.MinimumBillS[c.Type] / 3600})
	}
	slices.SortStableFunc(rows, func(x, y cloudPlanRow) int {
		return cmp.Or(cmp.Compare(x.USDHour, y.USDHour), cmp.Compare(y.Workers, x.Workers), cmp.Compare(x.Batch, y.Batch))
	})
	return rows
}

// writeCloudPlan prints the offers and the candidates as tables.
func writeCloudPlan(w io.Writer, offers []plugins.Offer, rows []cloudPlanRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OFFERED NOW\tSLOTS\tON-DEMAND $/H\tSPOT $/H\tMINIMUM BILL")
	for _, o := range offers {
		spot := "-"
		if o.SpotUSD > 0 {
			spot = fmt.Sprintf("%.4f", o.SpotUSD)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.4f\t%s\t%.0f s\n", o.Type, o.Slots, o.OnDemandUSD, spot, o.MinimumBillS)
	}
	fmt.Fprintln(tw, "")
	fmt.Fprintln(tw, "TYPE\tMARKET\tMACHINES\tWORKERS\tBATCH\t$/H\tMINIMUM BILL")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.4f\t%s\n", r.Type, r.Market, r.Machines, r.Workers, r.Batch, r.USDHour, objective.USD(r.MinBill))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write the plan: %w", err)
	}
	return nil
}
