package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/awscloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/optimizer/price"
)

// liveFlags choose the provider whose live prices scavctl prices --live shows.
type liveFlags struct {
	live     bool
	provider string
	region   string
	endpoint string
	zones    []string
	types    []string
	catalog  string
}

func (f *liveFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&f.live, "live", false, "show a cloud provider's spot prices now next to the catalog's (--provider)")
	fl.StringVar(&f.provider, "provider", "aws", "with --live: aws (DescribeSpotPriceHistory; the SDK's credentials and region) or local (a local cloud catalog)")
	fl.StringVar(&f.region, "region", "", "with --live, aws: the region (default: the SDK's)")
	fl.StringVar(&f.endpoint, "endpoint", "", "with --live, aws: the EC2 endpoint URL (default: the region's)")
	fl.StringSliceVar(&f.zones, "zones", nil, "with --live: the zones (aws: required)")
	fl.StringSliceVar(&f.types, "types", nil, "with --live: the instance types (aws: required; each in the catalog)")
	fl.StringVar(&f.catalog, "catalog", "", "with --live, local: a local cloud catalog file (default: what the running scavd's cloudvm launcher offers now)")
}

// liveRow is one type and zone: the catalog's prices and the live spot price.
type liveRow struct {
	Type        string    `json:"type"`
	Zone        string    `json:"zone"`
	OnDemandUSD float64   `json:"on_demand_usd"`
	CatalogSpot float64   `json:"catalog_spot_usd,omitempty"`
	SpotUSD     float64   `json:"spot_usd,omitempty"`
	At          time.Time `json:"at,omitempty"`
}

// livePrices reads the provider's prices now.
func (f *liveFlags) livePrices(ctx context.Context, a *app, cat *price.Catalog) ([]liveRow, error) {
	if f.provider == "local" {
		return f.localPrices(ctx, a)
	}
	if f.provider != "aws" {
		return nil, fmt.Errorf("--provider %q: use aws or local", f.provider)
	}
	p, err := awscloud.New(ctx, awscloud.Options{Logger: a.log, Region: f.region, Zones: f.zones, Types: f.types, Catalog: cat, Endpoint: f.endpoint})
	if err != nil {
		return nil, err
	}
	prices, err := p.Prices(ctx, f.types)
	if err != nil {
		return nil, err
	}
	var rows []liveRow
	for _, t := range f.types {
		m, _ := cat.Lookup(t)
		od, _ := m.Hourly(false)
		cs, _ := m.Hourly(true)
		for _, z := range f.zones {
			r := liveRow{Type: t, Zone: z, OnDemandUSD: od, CatalogSpot: cs}
			for _, pr := range prices {
				if pr.Type == t && pr.Zone == z {
					r.SpotUSD, r.At = pr.USDPerHour, pr.At
				}
			}
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// localPrices are a local cloud's prices: a catalog file's (--catalog),
// else what the running scavd's launcher offers now (its local cloud's
// catalog, less what is blocklisted).
func (f *liveFlags) localPrices(ctx context.Context, a *app) ([]liveRow, error) {
	var rows []liveRow
	if f.catalog != "" {
		lc, err := localcloud.LoadCatalog(f.catalog)
		if err != nil {
			return nil, err
		}
		for _, t := range lc.Types {
			od, _ := t.HourlyIn(localcloud.Region, false)
			sp, _ := t.HourlyIn(localcloud.Region, true)
			for _, z := range lc.Zones(localcloud.Provider, localcloud.Region) {
				rows = append(rows, liveRow{Type: t.Name, Zone: z, OnDemandUSD: od, CatalogSpot: sp, SpotUSD: sp})
			}
		}
		return rows, nil
	}
	var offers api.Offers
	if err := a.withClient(ctx, func(ctx context.Context, c *api.Client) (err error) {
		offers, err = c.Offers(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	if len(offers.Offers) == 0 {
		return nil, fmt.Errorf("the scavd runs launcher %s, which offers no machines: --provider local shows a cloudvm scavd's local cloud (scavd --launcher cloudvm), or --catalog FILE's", offers.Launcher)
	}
	now := time.Now().UTC()
	for _, o := range offers.Offers {
		rows = append(rows, liveRow{Type: o.Type, Zone: "(cheapest)", OnDemandUSD: o.OnDemandUSD, SpotUSD: o.SpotUSD, At: now})
	}
	return rows, nil
}

func writeLiveTable(w io.Writer, rows []liveRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tZONE\tON-DEMAND $/H\tCATALOG SPOT $/H\tLIVE SPOT $/H\tSPOT/ON-DEMAND\tAT")
	for _, r := range rows {
		cs, ls, ratio, at := "-", "-", "-", "-"
		if r.CatalogSpot > 0 {
			cs = fmt.Sprintf("%.4f", r.CatalogSpot)
		}
		if r.SpotUSD > 0 {
			ls = fmt.Sprintf("%.4f", r.SpotUSD)
			if r.OnDemandUSD > 0 {
				ratio = fmt.Sprintf("%.0f%%", 100*r.SpotUSD/r.OnDemandUSD)
			}
		}
		if !r.At.IsZero() {
			at = r.At.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.4f\t%s\t%s\t%s\t%s\n", r.Type, r.Zone, r.OnDemandUSD, cs, ls, ratio, at)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write live prices: %w", err)
	}
	return nil
}
