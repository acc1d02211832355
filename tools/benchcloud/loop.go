package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/report"
	"github.com/scavenger-ml/scavenger/stepstats"
)

// outcome is one job of the loop comparison: its configuration and what it took.
type outcome struct {
	name      string
	args      []string // the flags that fix its configuration
	timeS     float64
	usd       float64
	attempts  int
	last      string
	costError *report.CostCheck
}

// val is the outcome's figure for objective obj.
func (o outcome) val(obj string) float64 {
	if obj == "time" {
		return o.timeS
	}
	return o.usd
}

// unit writes a figure of objective obj.
func unit(obj string, v float64) string {
	if obj == "time" {
		return fmt.Sprintf("%.1f s", v)
	}
	return fmt.Sprintf("$%.5f", v)
}

// loopJob runs a job with target steps' work at batch 32 and reads its
// time, bill and the cost check of its last decision that predicted one.
func (b *bench) loopJob(ctx context.Context, name string, target int, args ...string) (outcome, error) {
	work := strconv.Itoa(target * 32)
	// Every run counts its work at the smallest batch: a fixed run at a
	// larger one does the same work as the live loop, not fewer samples'.
	all := append([]string{"--spot", "--target-samples", work, "--base-batch", strconv.Itoa(b.batches[0]), "--grace", "30s"}, args...)
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
	r := outcome{name: name, args: args, timeS: j.Ended.Sub(*j.Started).Seconds(), usd: j.Cost.USD, attempts: len(j.Attempts)}
	c := j.Attempts[len(j.Attempts)-1].Config
	r.last = fmt.Sprintf("%d × %s, batch %d", c.Workers, c.MachineType, c.GlobalBatch)
	if bl := report.BilledOf(j); bl != nil && len(bl.Checks) > 0 {
		r.costError = &bl.Checks[len(bl.Checks)-1]
	}
	return r, nil
}

// rank runs every fixed candidate on a short job (b.target).
func (b *bench) rank(ctx context.Context) ([]outcome, error) {
	var fixed []outcome
	for _, typ := range b.types {
		for _, k := range b.workers {
			for _, bs := range b.batches {
				r, err := b.loopJob(ctx, fixedName(typ, k, bs), b.target, fixedArgs(typ, k, bs)...)
				if err != nil {
					return nil, err
				}
				fixed = append(fixed, r)
			}
		}
	}
	return fixed, nil
}

// fixedName and fixedArgs name a fixed candidate and give its flags.
func fixedName(typ string, k, bs int) string { return fmt.Sprintf("%d × %s, batch %d", k, typ, bs) }

func fixedArgs(typ string, k, bs int) []string {
	return []string{"--types", typ, "--workers", strconv.Itoa(k), "--batch-size", strconv.Itoa(bs)}
}

// parseRanked reads --ranked: TYPE:K:B:SECONDS:USD rows, comma-separated.
func parseRanked(s string) ([]outcome, error) {
	var out []outcome
	for _, row := range strings.Split(s, ",") {
		f := strings.Split(row, ":")
		if len(f) != 5 {
			return nil, fmt.Errorf("--ranked %q: want TYPE:K:B:SECONDS:USD", row)
		}
		k, err1 := strconv.Atoi(f[1])
		bs, err2 := strconv.Atoi(f[2])
		sec, err3 := strconv.ParseFloat(f[3], 64)
		usd, err4 := strconv.ParseFloat(f[4], 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil || k < 1 || bs < 1 || !(sec > 0) || !(usd > 0) {
			return nil, fmt.Errorf("--ranked %q: want TYPE:K:B:SECONDS:USD with positive numbers", row)
		}
		out = append(out, outcome{name: fixedName(f[0], k, bs), args: fixedArgs(f[0], k, bs), timeS: sec, usd: usd})
	}
	return out, nil
}

// liveArgs are the live loop's flags for objective obj.
func (b *bench) liveArgs(obj string) []string {
	return []string{"--types", strings.Join(b.types, ","), "--workers", "1:2", "--batch-size", "32:128", "--policy", "adaptive", "--objective", obj}
}

// loop ranks every fixed candidate on a short job (b.target), then, for
// each objective of b.objectives (time and cost), compares the live loop with the best
// fixed candidate on a job that takes b.longS at that candidate — at least
// 3 minutes — running the two alternately, b.repeats times each, and
// reporting the medians.
func (b *bench) loop(ctx context.Context) error {
	fixed, from := b.ranked, ""
	if fixed != nil {
		from = ", taken from an earlier run (--ranked)"
	} else {
		var err error
		if fixed, err = b.rank(ctx); err != nil {
			return err
		}
	}
	fmt.Printf("## Every fixed candidate on a short job (%d steps' work at batch 32, spot): the ranking%s\n\n", b.target, from)
	fmt.Println("| configuration | time to finish s | billed $ |\n|---|---|---|")
	for _, r := range fixed {
		fmt.Printf("| %s | %.1f | %.5f |\n", r.name, r.timeS, r.usd)
	}
	fmt.Println()
	type comparison struct {
		obj         string
		best        outcome
		target      int
		fixed, live []outcome
	}
	var cmps []comparison
	for _, obj := range b.objectives {
		best := slices.MinFunc(fixed, func(x, y outcome) int { return cmp.Compare(x.val(obj), y.val(obj)) })
		c := comparison{obj: obj, best: best, target: int(math.Ceil(float64(b.target) * max(b.longS, 180) / best.timeS))}
		for range b.repeats {
			f, err := b.loopJob(ctx, best.name, c.target, best.args...)
			if err != nil {
				return err
			}
			l, err := b.loopJob(ctx, "live, "+obj, c.target, b.liveArgs(obj)...)
			if err != nil {
				return err
			}
			c.fixed, c.live = append(c.fixed, f), append(c.live, l)
		}
		cmps = append(cmps, c)
	}
	fmt.Printf("## The live loop against the best fixed (type, K, B), a job of ≥ 3 minutes at it (runs interleaved, %d each, medians)\n\n", b.repeats)
	fmt.Println("| objective | job (steps at batch 32) | best fixed | fixed: each | live: each (last configuration) | median fixed | median live | overhead (goal ≤ 10 %) |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, c := range cmps {
		var fv, lv []float64
		var fs, ls []string
		for i := range c.fixed {
			fv, lv = append(fv, c.fixed[i].val(c.obj)), append(lv, c.live[i].val(c.obj))
			fs = append(fs, unit(c.obj, c.fixed[i].val(c.obj)))
			ls = append(ls, fmt.Sprintf("%s (%d attempts, %s)", unit(c.obj, c.live[i].val(c.obj)), c.live[i].attempts, c.live[i].last))
		}
		mf, ml := stepstats.Median(fv), stepstats.Median(lv)
		fmt.Printf("| %s | %d | %s | %s | %s | %s | %s | **%+.1f %%** |\n", c.obj, c.target, c.best.name, strings.Join(fs, ", "), strings.Join(ls, "; "),
			unit(c.obj, mf), unit(c.obj, ml), 100*(ml-mf)/mf)
	}
	fmt.Println()
	fmt.Println("## Live cost error: recorded vs predicted at the committed decision (the comparison's live runs)\n\n| run | decision at step | predicted total | recorded (billed) | error |\n|---|---|---|---|---|")
	for _, c := range cmps {
		for i, l := range c.live {
			if e := l.costError; e != nil {
				fmt.Printf("| live, %s, run %d | %d | $%.5f | $%.5f | %+.1f %% |\n", c.obj, i+1, e.Step, e.PredictedUSD, e.ActualUSD, e.ErrorPct)
			}
		}
	}
	fmt.Println()
	return nil
}
