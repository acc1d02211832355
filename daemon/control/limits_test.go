package control

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// TestLimitReached: a job's limits as the controller checks them: the
// measured spend against --budget (any objective), and the time since the
// job was submitted against --deadline for cost objectives; the reason
// names the limit and what was reached, with the digits a small amount
// needs.
func TestLimitReached(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opt     api.Optimize
		spent   float64
		known   bool
		elapsed time.Duration
		want    string // in the reason; "" for none
	}{
		{"under the budget", api.Optimize{Objective: "time", BudgetUSD: 0.002}, 0.0019, true, time.Hour, ""},
		{"budget reached", api.Optimize{Objective: "time", BudgetUSD: 0.002}, 0.00213, true, 0, "the budget of $0.002 is spent ($0.00213"},
		{"spend unknown", api.Optimize{Objective: "time", BudgetUSD: 0.002}, 0, false, 0, ""},
		{"no budget", api.Optimize{Objective: "time"}, 5, true, 0, ""},
		{"deadline of a cost objective", api.Optimize{Objective: "cost", Deadline: api.Duration(time.Minute)}, 0, false, 61 * time.Second, "the deadline of 1m0s is reached (1m1s"},
		{"deadline of a time objective", api.Optimize{Objective: "time", Deadline: api.Duration(time.Minute)}, 0, false, time.Hour, ""},
		{"large budget", api.Optimize{Objective: "knee", BudgetUSD: 12.5}, 12.51, true, 0, "the budget of $12.50 is spent ($12.51"},
	} {
		got := limitReached(tc.opt, tc.spent, tc.known, tc.elapsed)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestBudgetStopsTheJob: once the job's machines have cost its budget, the
// controller hands the runner a verdict that stops the job, naming the
// budget and the spend, once.
func TestBudgetStopsTheJob(t *testing.T) {
	offers := []plugins.Offer{{Type: "a", Slots: 1, OnDemandUSD: 3.6}}
	j := api.Job{ID: "j", Created: time.Now(), Config: plugins.Config{Workers: 1, GlobalBatch: 32, MachineType: "a", Market: plugins.MarketOnDemand, LRScale: 1},
		Optimize: api.Optimize{Policy: "full", Objective: "time", BudgetUSD: 0.002, MinWorkers: 1, MaxWorkers: 1, MinBatch: 32, MaxBatch: 32,
			TargetSamples: 32 * 10000, Types: []string{"a"}}}
	verdicts := make(chan Verdict, 4)
	c, err := New(j, offers, runningJob{j.Config}, verdicts, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	start := time.Now().Add(-time.Second) // $0.001 a second: $0.001 so far
	c.SetCharges([]plugins.Charge{{Instance: "i-1", Type: "a", Market: plugins.MarketOnDemand, USDPerHour: 3.6, Start: start}})
	c.Steps([]telemetry.StepRecord{{Attempt: 3, Step: 1}})
	select {
	case v := <-verdicts:
		if v.Stop != "" {
			t.Fatalf("stopped under the budget: %+v", v)
		}
	case <-time.After(200 * time.Millisecond):
	}
	c.SetCharges([]plugins.Charge{{Instance: "i-1", Type: "a", Market: plugins.MarketOnDemand, USDPerHour: 3.6, Start: start.Add(-2 * time.Second)}})
	for deadline := time.Now().Add(5 * time.Second); ; {
		c.Steps([]telemetry.StepRecord{{Attempt: 3, Step: 2}})
		select {
		case v := <-verdicts:
			if v.Stop == "" {
				continue
			}
			if !strings.Contains(v.Stop, "budget of $0.002") || !strings.Contains(v.Stop, "spent ($0.003") {
				t.Fatalf("stop verdict %q: want the budget and the spend", v.Stop)
			}
			c.Steps([]telemetry.StepRecord{{Attempt: 3, Step: 3}})
			select {
			case again := <-verdicts:
				if again.Stop != "" {
					t.Fatalf("a second stop verdict: %+v", again)
				}
			case <-time.After(200 * time.Millisecond):
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no stop verdict once the budget was spent")
		}
	}
}

// TestStepsAreBounded: the records waiting for the controller are bounded
// (maxQueued): past it a message's records are left out, not queued, and
// once the controller took what waited, the next are queued again.
func TestStepsAreBounded(t *testing.T) {
	c := &Controller{recs: make(chan []telemetry.StepRecord, maxQueued)}
	block := make([]telemetry.StepRecord, 1000)
	for range 4 {
		c.Steps(block)
	}
	c.Steps(block) // 5,000 > maxQueued: left out
	c.Steps(nil)
	if len(c.recs) != 4 || c.queued.Load() != 4000 {
		t.Fatalf("%d messages, %d records queued; want 4 and 4000", len(c.recs), c.queued.Load())
	}
	for range 4 { // the controller takes them (Run's receive)
		c.queued.Add(-int64(len(<-c.recs)))
	}
	c.Steps(block)
	if len(c.recs) != 1 || c.queued.Load() != 1000 {
		t.Fatalf("after the controller took them: %d messages, %d records queued; want 1 and 1000", len(c.recs), c.queued.Load())
	}
}
