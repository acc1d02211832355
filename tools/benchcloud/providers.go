package main

import (
	"context"
	"fmt"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/stepstats"
)

// providerRow is one provider's figures.
type providerRow struct {
	name        string
	up, notices []float64
	costErr     string
	where       []string
}

// providers measures each provider — the local cloud, and aws and gce
// through their emulations, backed by a local cloud of the bench's own —
// the same way: provision → sshd answers (through the provider, 5
// instances), spot notice → the job's next attempt's first step (a scavd
// over the provider, 3 notices, each blocklisting a zone), and the error
// of the cost predicted at the committed decision of a live cost job.
func (b *bench) providers(ctx context.Context) error {
	cat, err := localcloud.LoadCatalog(b.catalog)
	if err != nil {
		return err
	}
	back, err := localcloud.Open(ctx, localcloud.Options{Logger: zap.NewNop(), Dir: filepath.Join(b.state, "pcloud"), Catalog: cat})
	if err != nil {
		return err
	}
	defer func() { _ = back.Destroy(context.Background()) }()
	local := b.localSite(ctx, filepath.Join(b.state, "site-local"), back)
	aws, err := b.awsSite(ctx, back)
	if err != nil {
		return fmt.Errorf("aws emulation: %w", err)
	}
	defer aws.close()
	gce, err := b.gceSite(ctx, back)
	if err != nil {
		return fmt.Errorf("gce emulation: %w", err)
	}
	defer gce.close()
	var rows []providerRow
	for _, s := range []site{local, aws, gce} {
		row, err := b.providerRow(ctx, s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		rows = append(rows, row)
	}
	fmt.Println("## Providers: local, aws and gce side by side")
	fmt.Println()
	fmt.Println("aws and gce are their emulations (internal/ec2emu, internal/gceemu) through the real clients (aws-sdk-go-v2,")
	fmt.Println("google.golang.org/api/compute/v1), their instances the local cloud's machines: the figures time the")
	fmt.Println("provider code paths and the emulated APIs, not EC2 or Compute Engine.")
	fmt.Println()
	fmt.Println("| provider | provision → sshd answers, median (min–max), 5 | spot notice → running again, median (min–max), 3 | cost error at the committed decision (live, cost objective) |")
	fmt.Println("|---|---|---|---|")
	for _, r := range rows {
		ulo, uhi := minMax(r.up)
		nlo, nhi := minMax(r.notices)
		fmt.Printf("| %s | %.0f ms (%.0f–%.0f) | %.2f s (%.2f–%.2f) | %s |\n", r.name, 1e3*stepstats.Median(r.up), 1e3*ulo, 1e3*uhi,
			stepstats.Median(r.notices), nlo, nhi, r.costErr)
	}
	fmt.Println()
	return nil
}

// providerRow measures one site, with a scavd of its own.
func (b *bench) providerRow(ctx context.Context, s site) (providerRow, error) {
	row := providerRow{name: s.name}
	types, _ := s.prov.Types(ctx)
	var err error
	if row.up, err = provisionToSSH(ctx, s.prov, s.types[0], types[0].Zones[0], 5); err != nil {
		return row, fmt.Errorf("provision → sshd: %w", err)
	}
	d, err := b.startScavdOn(ctx, s.state, s.args, s.env)
	if err != nil {
		return row, err
	}
	defer d.stop()
	if row.notices, row.where, err = b.noticeTimes(ctx, s, 3); err != nil {
		return row, fmt.Errorf("notices: %w", err)
	}
	live, err := b.loopJob(ctx, "live, cost", b.providerTarget, "--types", s.types[0]+","+s.types[1], "--workers", "1:2", "--batch-size", "32:128",
		"--policy", "adaptive", "--objective", "cost")
	if err != nil {
		return row, fmt.Errorf("live cost job: %w", err)
	}
	row.costErr = "no decision predicted a cost"
	if c := live.costError; c != nil {
		row.costErr = fmt.Sprintf("%+.1f %% (predicted $%.5f at step %d, billed $%.5f)", c.ErrorPct, c.PredictedUSD, c.Step, c.ActualUSD)
	}
	return row, nil
}
