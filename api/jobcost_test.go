package api

import (
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/plugins"
)

func TestJobCost(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hour := t0.Add(time.Hour)
	ended := t0.Add(30 * time.Minute)
	decided := Decision{Time: t0.Add(10 * time.Minute), PredictedS: 3000, PredictedUSD: 0.5}
	tests := []struct {
		name  string
		job   Job
		want  JobCost
		label string
	}{
		{"no price, no bill: nothing, not even a decision's placeholder cost",
			Job{State: StateRunning, Started: &t0, Decisions: []Decision{decided}},
			JobCost{Basis: CostNone}, "no cost: no price set (scavctl run --price USD-per-hour, or --machine-type from the price catalog)"},
		{"priced, running: the time at the price",
			Job{State: StateRunning, Started: &t0, Optimize: Optimize{PriceUSDPerHour: 2}, Decisions: []Decision{decided}},
			JobCost{Basis: CostPriced, USD: 2, PriceUSDPerHour: 2}, "$2 at $2/h"},
		{"priced, ended: its time, no prediction",
			Job{State: StateSucceeded, Started: &t0, Ended: &ended, Optimize: Optimize{PriceUSDPerHour: 0.5}, Decisions: []Decision{decided}},
			JobCost{Basis: CostPriced, USD: 0.25, PriceUSDPerHour: 0.5}, "$0.25 at $0.5/h"},
		{"billed: the bill, whatever the price",
			Job{State: StateSucceeded, Started: &t0, Ended: &ended, Optimize: Optimize{PriceUSDPerHour: 9}, Cost: &Cost{USD: 0.00067}},
			JobCost{Basis: CostBilled, USD: 0.00067}, "$0.00067 billed for its machines"},
		{"billed before the first bill: a machine type the launcher chose",
			Job{State: StateRunning, Started: &t0, Config: plugins.Config{MachineType: "loc.half"},
				Decisions: []Decision{{Time: t0.Add(50 * time.Minute), PredictedS: 1200, PredictedUSD: 0.06}}},
			JobCost{Basis: CostBilled}, "$0 billed for its machines"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.job.CostAt(hour)
			if got != tt.want {
				t.Errorf("CostAt = %+v, want %+v", got, tt.want)
			}
			if got.Label() != tt.label {
				t.Errorf("Label = %q, want %q", got.Label(), tt.label)
			}
			if tt.job.ShowsCost() != (tt.want.Basis != CostNone) {
				t.Errorf("ShowsCost = %v for basis %s", tt.job.ShowsCost(), tt.want.Basis)
			}
		})
	}
}

func TestUSDText(t *testing.T) {
	for v, want := range map[float64]string{0: "$0", 0.00004: "<$0.0001", 0.00067: "$0.00067", 0.012345: "$0.0123",
		1.7709: "$1.77", 99.94: "$99.9", 1234.4: "$1234", 2.5e6: "$2.5M"} {
		if got := USDText(v); got != want {
			t.Errorf("USDText(%v) = %q, want %q", v, got, want)
		}
	}
}
