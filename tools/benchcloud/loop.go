package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/report"
	"github.com/scavenger-ml/scavenger/stepstats"
)

// outcome is one job of the loop comparison: its configuration and what it took.
type outcome struct {
	name      string
	timeS     float64
	usd       float64
	attempts  int
	last      string
	costError *report.CostCheck
}

// loopJob runs a job with the loop's work and reads its time, bill and
// the cost check of its last decision that predicted one.
func (b *bench) loopJob(ctx context.Context, name string, args ...string) (outcome, error) {
	work := strconv.Itoa(b.target * 32)
	all := append([]string{"--spot", "--target-samples", work, "--grace", "30s"}, args...)
	all = append(all, "--", b.python, "examples/resumable_cnn.py")
	id, err := b.runJob(ctx, all...)
	if err != nil {
		return outcome{}, err
	}
	j, err := b.job(id)
	if err != nil {
		return outcome{}, err
	}
	if j.State != api.StateSucceeded || j.Started == nil || j.Ended == nil || j.Cost == nil {
		return outcome{}, fmt.Errorf("job %s: %s (%s)", id, j.State, j.Message)
	}
	r := outcome{name: name, timeS: j.Ended.Sub(*j.Started).Seconds(), usd: j.Cost.USD, attempts: len(j.Attempts)}
	c := j.Attempts[len(j.Attempts)-1].Config
	r.last = fmt.Sprintf("%d × %s, batch %d", c.Workers, c.MachineType, c.GlobalBatch)
	if bl := report.BilledOf(j); bl != nil && len(bl.Checks) > 0 {
		r.costError = &bl.Checks[len(bl.Checks)-1]
	}
	return r, nil
}

// loop runs every fixed candidate and the live loop for time and for cost.
func (b *bench) loop(ctx context.Context) error {
	var fixed []outcome
	for _, typ := range b.types {
		for _, k := range b.workers {
			for _, bs := range b.batches {
				name := fmt.Sprintf("%d × %s, batch %d", k, typ, bs)
				r, err := b.loopJob(ctx, name, "--types", typ, "--workers", strconv.Itoa(k), "--batch-size", strconv.Itoa(bs))
				if err != nil {
					return err
				}
				fixed = append(fixed, r)
			}
		}
	}
	live := map[string]outcome{}
	for _, obj := range []string{"time", "cost"} {
		r, err := b.loopJob(ctx, "live, "+obj, "--types", "loc.half,loc.full", "--workers", "1:2", "--batch-size", "32:128",
			"--policy", "adaptive", "--objective", obj)
		if err != nil {
			return err
		}
		live[obj] = r
	}
	b.printLoop(fixed, live)
	return nil
}

// printLoop writes the loop tables.
func (b *bench) printLoop(fixed []outcome, live map[string]outcome) {
	fmt.Printf("## The live loop against every fixed candidate (%d steps' work at batch 32, spot, adaptive policy)\n\n", b.target)
	fmt.Println("| configuration | time to finish s | billed $ |\n|---|---|---|")
	for _, r := range fixed {
		fmt.Printf("| %s | %.1f | %.5f |\n", r.name, r.timeS, r.usd)
	}
	for _, obj := range []string{"time", "cost"} {
		r := live[obj]
		fmt.Printf("| **live, objective %s** (%d attempts, ended on %s) | %.1f | %.5f |\n", obj, r.attempts, r.last, r.timeS, r.usd)
	}
	fmt.Println()
	fmt.Println("| objective | live | best fixed | overhead vs the best fixed (goal ≤ 10 %) | median fixed | live / median |\n|---|---|---|---|---|---|")
	for _, obj := range []string{"time", "cost"} {
		val := func(r outcome) float64 {
			if obj == "time" {
				return r.timeS
			}
			return r.usd
		}
		s := append([]outcome(nil), fixed...)
		sort.Slice(s, func(i, j int) bool { return val(s[i]) < val(s[j]) })
		var vals []float64
		for _, r := range s {
			vals = append(vals, val(r))
		}
		l, best, med := val(live[obj]), s[0], stepstats.Median(vals)
		unit := func(v float64) string {
			if obj == "time" {
				return fmt.Sprintf("%.1f s", v)
			}
			return fmt.Sprintf("$%.5f", v)
		}
		fmt.Printf("| %s | %s | %s (%s) | **%+.1f %%** | %s | %.2f |\n", obj, unit(l), unit(val(best)), best.name, 100*(l-val(best))/val(best), unit(med), l/med)
	}
	fmt.Println()
	fmt.Println("## Live cost error: recorded vs predicted at the committed decision\n\n| run | decision at step | predicted total | recorded (billed) | error |\n|---|---|---|---|---|")
	for _, obj := range []string{"time", "cost"} {
		if c := live[obj].costError; c != nil {
			fmt.Printf("| live, %s | %d | $%.5f | $%.5f | %+.1f %% |\n", obj, c.Step, c.PredictedUSD, c.ActualUSD, c.ErrorPct)
		}
	}
	fmt.Println()
}
