// Command benchcloud measures the cloudvm launcher on the local cloud of
// this machine (root): how long an instance takes from provisioning to its
// workers' first step and from termination to gone, per type; how long a
// job takes from a spot notice to running again elsewhere; and the live
// loop (type × workers × batch) against every fixed candidate with the
// same work, for the time and the cost objectives, with the error of the
// cost predicted at the committed decision. It prints Markdown tables.
//
//	go run ./tools/benchcloud --scavd bin/scavd --scavctl bin/scavctl [--target 8000]
//
// --only-loop --objectives time runs the live loop's ranking and its time
// comparison alone (after a policy change, say); --target sets the ranking's
// short job, from which the comparison's job is sized (--long-s).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
)

func main() {
	// A signal ends the jobs and the bench; the clouds are destroyed on the way out.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchcloud:", err)
		os.Exit(1)
	}
}

// bench is the running bench: its binaries and the scavd it drives.
type bench struct {
	scavd, scavctl, python  string
	catalog, state          string
	home                    string // the state directory of the scavd the jobs go to
	target, providerTarget  int
	notices                 int
	types                   []string
	workers, batches        []int
	skipLoop, skipProviders bool
	onlyLoop                bool
	objectives              []string
	longS                   float64
	repeats                 int
	// ranked, when given, replaces the ranking with an earlier run's
	// (its table's rows, --ranked): the comparison alone runs.
	ranked []outcome
}

func run(ctx context.Context) error {
	var b bench
	flag.StringVar(&b.scavd, "scavd", "bin/scavd", "scavd binary")
	flag.StringVar(&b.scavctl, "scavctl", "bin/scavctl", "scavctl binary")
	flag.StringVar(&b.python, "python", "/usr/bin/python3", "python with torch")
	flag.StringVar(&b.catalog, "catalog", "tools/benchcloud/catalog.json", "local cloud catalog")
	flag.IntVar(&b.target, "target", 8000, "work of each loop run: steps at batch 32")
	flag.IntVar(&b.providerTarget, "provider-target", 3000, "work of each provider's live cost job: steps at batch 32")
	flag.IntVar(&b.notices, "notices", 5, "spot notices to time")
	flag.BoolVar(&b.skipLoop, "skip-loop", false, "leave out the live loop against the fixed candidates")
	flag.BoolVar(&b.skipProviders, "skip-providers", false, "leave out the providers' table")
	flag.Float64Var(&b.longS, "long-s", 200, "the live loop's comparison job takes this long at the best fixed configuration, seconds (at least 180)")
	flag.IntVar(&b.repeats, "repeats", 3, "runs of the best fixed and of the live loop, interleaved, for each objective")
	flag.BoolVar(&b.onlyLoop, "only-loop", false, "run the live loop's part alone (no instance, notice or provider tables)")
	objectives := flag.String("objectives", "time,cost", "the objectives the live loop is compared on")
	ranked := flag.String("ranked", "", "skip the ranking and take an earlier run's: its rows as TYPE:K:B:SECONDS:USD, comma-separated (the fixed runs do not depend on the policy)")
	flag.Parse()
	if *ranked != "" {
		var err error
		if b.ranked, err = parseRanked(*ranked); err != nil {
			return err
		}
	}
	b.objectives = strings.Split(*objectives, ",")
	for _, o := range b.objectives {
		if o != "time" && o != "cost" {
			return fmt.Errorf("--objectives %q: each must be time or cost", *objectives)
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("the local cloud needs root (network namespaces, veths, cgroups)")
	}
	path, err := filepath.Abs(b.catalog)
	if err != nil {
		return err
	}
	b.catalog = path
	cat, err := localcloud.LoadCatalog(path)
	if err != nil {
		return err
	}
	b.workers, b.batches = []int{1, 2}, []int{32, 128}
	var kinds []string
	for _, t := range cat.Types {
		b.types = append(b.types, t.Name)
		od, _ := t.Hourly(false)
		sp, _ := t.Hourly(true)
		kinds = append(kinds, fmt.Sprintf("%s %g CPU, $%.2f/h on demand, $%.2f/h spot", t.Name, t.VCPUs, od, sp))
	}
	if b.state, err = os.MkdirTemp("", "benchcloud-"); err != nil {
		return err
	}
	defer os.RemoveAll(b.state)
	fmt.Printf("Catalog: %s (%s; billed per %g s, %g s at least).\n\n", filepath.Base(b.catalog), strings.Join(kinds, "; "),
		cat.BillingOf(localcloud.Provider).GranularityS, cat.BillingOf(localcloud.Provider).MinimumS)
	if !b.onlyLoop {
		if err := b.terminations(ctx); err != nil {
			return fmt.Errorf("terminations: %w", err)
		}
		if err := b.localParts(ctx); err != nil {
			return err
		}
		if b.skipProviders {
			fmt.Println("(providers left out: --skip-providers)")
		} else if err := b.providers(ctx); err != nil {
			return fmt.Errorf("providers: %w", err)
		}
	}
	if b.skipLoop {
		return nil
	}
	d, err := b.startScavd(ctx)
	if err != nil {
		return err
	}
	defer d.stop()
	return b.loop(ctx)
}

// localParts are the local cloud's figures through a scavd: provision to
// first step, and spot notices.
func (b *bench) localParts(ctx context.Context) error {
	d, err := b.startScavd(ctx)
	if err != nil {
		return err
	}
	defer d.stop()
	if err := b.firstSteps(ctx, b.localSite(ctx, b.state, nil)); err != nil {
		return fmt.Errorf("provision to first step: %w", err)
	}
	if err := b.noticeToRunning(ctx, b.localSite(ctx, b.state, nil)); err != nil {
		return fmt.Errorf("spot notices: %w", err)
	}
	return nil
}

// minMax is the least and the greatest of v (0, 0 when it is empty).
func minMax(v []float64) (float64, float64) {
	if len(v) == 0 {
		return 0, 0
	}
	return slices.Min(v), slices.Max(v)
}
