package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/internal/syncbuf"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/stepstats"
)

// terminations times, on a local cloud of the bench's own, each type's
// instance from the provisioning request to its sshd answering and from
// the termination request to nothing of it left (namespace, link, cgroup,
// processes), five times each.
func (b *bench) terminations(ctx context.Context) error {
	cat, err := localcloud.LoadCatalog(b.catalog)
	if err != nil {
		return err
	}
	c, err := localcloud.Open(ctx, localcloud.Options{Logger: zap.NewNop(), Dir: filepath.Join(b.state, "tcloud"), Catalog: cat})
	if err != nil {
		return err
	}
	defer func() { _ = c.Destroy(context.Background()) }()
	keys, err := provider.NewKeys()
	if err != nil {
		return err
	}
	boot := keys.Boot
	fmt.Println("## Instances: provisioning and termination (local cloud, 5 each)")
	fmt.Println()
	fmt.Println("| type | provision → sshd answers, median (min–max) | terminate → gone, median (min–max) |")
	fmt.Println("|---|---|---|")
	for _, typ := range b.types {
		var up, down []float64
		for i := range 5 {
			t0 := time.Now()
			insts, err := c.Provision(ctx, provider.ProvisionRequest{Type: typ, Count: 1, Market: provider.OnDemand, Zone: cat.Zones(localcloud.Provider, localcloud.Region)[0],
				Token: fmt.Sprintf("bench-%s-%d", typ, i), Boot: boot})
			if err != nil {
				return err
			}
			if _, err := c.WaitReady(ctx, []string{insts[0].ID}); err != nil {
				return err
			}
			up = append(up, time.Since(t0).Seconds())
			t1 := time.Now()
			if err := c.Terminate(ctx, []string{insts[0].ID}); err != nil {
				return err
			}
			down = append(down, time.Since(t1).Seconds())
			if left := c.Leftovers(); len(left) > 0 {
				return fmt.Errorf("left after terminate: %v", left)
			}
		}
		lo, hi := minMax(up)
		dlo, dhi := minMax(down)
		fmt.Printf("| %s | %.0f ms (%.0f–%.0f) | %.0f ms (%.0f–%.0f) |\n", typ, 1e3*stepstats.Median(up), 1e3*lo, 1e3*hi, 1e3*stepstats.Median(down), 1e3*dlo, 1e3*dhi)
	}
	fmt.Println()
	return nil
}

// firstSteps times, per type, a one-worker job from the instance's
// provisioning (its launch time) to the workers' first step: boot, SSH,
// python and torch import, process group, first step (3 jobs each).
func (b *bench) firstSteps(ctx context.Context, s site) error {
	fmt.Println("## Provision → first step of the workers (scavd, 1 worker, 3 jobs each)")
	fmt.Println()
	fmt.Println("| type | provision → first step, median (min–max) | of which provision → attempt started |")
	fmt.Println("|---|---|---|")
	for _, typ := range b.types {
		var first, started []float64
		for range 3 {
			id, err := b.runJob(ctx, "--types", typ, "--workers", "1", "--batch-size", "32", "--", b.python, "examples/resumable_cnn.py", "--steps", "20")
			if err != nil {
				return err
			}
			recs, err := s.records(ctx, id)
			if err != nil || len(recs) == 0 {
				return fmt.Errorf("instances of %s: %v, %w", id, recs, err)
			}
			steps, err := b.steps(id)
			if err != nil {
				return err
			}
			j, err := b.job(id)
			if err != nil {
				return err
			}
			launched := recs[0].Launched
			first = append(first, firstStep(steps, 1).Sub(launched).Seconds())
			started = append(started, j.Attempts[0].Started.Sub(launched).Seconds())
		}
		lo, hi := minMax(first)
		fmt.Printf("| %s | %.2f s (%.2f–%.2f) | %.2f s |\n", typ, stepstats.Median(first), lo, hi, stepstats.Median(started))
	}
	fmt.Println()
	return nil
}

// noticeToRunning times 5 spot notices of a job on the local cloud (see
// noticeTimes) and prints them.
func (b *bench) noticeToRunning(ctx context.Context, s site) error {
	times, where, err := b.noticeTimes(ctx, s, b.notices)
	if err != nil {
		return err
	}
	lo, hi := minMax(times)
	fmt.Printf("## Spot notice → workers running again elsewhere (%d notices, 60 s each)\n\n", len(times))
	fmt.Println("| measure | value |\n|---|---|")
	fmt.Printf("| **notice → first step on the new instance, median** | **%.2f s** (min %.2f, max %.2f) |\n", stepstats.Median(times), lo, hi)
	fmt.Printf("| each | %s |\n", strings.Join(fmtSecs(times), ", "))
	fmt.Printf("| where it went on | %s |\n\n", strings.Join(where, ", "))
	return nil
}

// noticeTimes interrupts the spot instance of a running job on s again and
// again (n times) and times each notice to the first step of the job's
// next attempt, on another instance (the next zone, or on demand).
func (b *bench) noticeTimes(ctx context.Context, s site, n int) ([]float64, []string, error) {
	cmd, errOut, err := b.startJob(ctx, "--types", s.types[0], "--spot", "--workers", "1", "--batch-size", "32", "--grace", "60s",
		"--", b.python, "examples/resumable_cnn.py", "--steps", "10000000")
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var times []float64
	var where []string
	for range n {
		d, to, err := b.oneNotice(ctx, s, errOut)
		if err != nil {
			return nil, nil, err
		}
		times, where = append(times, d), append(where, to)
	}
	id, _ := jobID(errOut)
	_ = exec.Command(b.scavctl, "--state-dir", b.home, "stop", id).Run()
	_ = cmd.Wait()
	return times, where, nil
}

// oneNotice waits for the job's attempt to run, interrupts its instance and
// returns the time to the next attempt's first step and where it runs.
func (b *bench) oneNotice(ctx context.Context, s site, errOut *syncbuf.Buffer) (float64, string, error) {
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(300 * time.Millisecond) {
		if time.Now().After(deadline) {
			return 0, "", fmt.Errorf("the job does not run:\n%s", errOut.String())
		}
		id, err := jobID(errOut)
		if err != nil {
			continue
		}
		j, err := b.job(id)
		if err != nil || len(j.Attempts) == 0 || j.Attempts[len(j.Attempts)-1].Ended != nil {
			continue
		}
		k := j.Attempts[len(j.Attempts)-1].Attempt
		steps, err := b.steps(id)
		if err != nil || firstStep(steps, k).IsZero() {
			continue
		}
		recs, err := s.records(ctx, id)
		if err != nil {
			return 0, "", err
		}
		var victim string
		for _, r := range recs {
			if r.Alive() && r.Market == provider.Spot && r.Interrupt == nil {
				victim = r.ID
			}
		}
		if victim == "" {
			return 0, "", fmt.Errorf("no spot instance to interrupt: %+v", recs)
		}
		t0 := time.Now()
		if err := s.interrupt(ctx, victim, 60*time.Second); err != nil {
			return 0, "", err
		}
		return b.nextAttempt(ctx, s, id, k, t0)
	}
}

// nextAttempt waits for the first step of the attempt after k.
func (b *bench) nextAttempt(ctx context.Context, s site, id string, k int, t0 time.Time) (float64, string, error) {
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		steps, err := b.steps(id)
		if err != nil {
			return 0, "", err
		}
		if t := firstStep(steps, k+1); !t.IsZero() {
			j, _ := b.job(id)
			c := j.Attempts[len(j.Attempts)-1].Config
			recs, _ := s.records(ctx, id)
			zone := "?"
			for _, r := range recs {
				if r.Alive() {
					zone = r.Zone + " " + r.Market
				}
			}
			return t.Sub(t0).Seconds(), fmt.Sprintf("attempt %d: %s in %s", k+1, c.MachineType, zone), nil
		}
	}
	return 0, "", fmt.Errorf("job %s did not run again after the notice", id)
}

func fmtSecs(v []float64) []string {
	var out []string
	for _, x := range v {
		out = append(out, strconv.FormatFloat(x, 'f', 2, 64))
	}
	return out
}
