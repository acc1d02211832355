package sim

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
)

// TestSweep runs every policy on every application and objective (knee,
// deadline and budget included) and checks the reports' invariants. It takes
// a few seconds; set SCAV_SIM_SWEEP=1 (and SCAV_SIM_NOISE=0.1 for noisy
// telemetry).
func TestSweep(t *testing.T) {
	if os.Getenv("SCAV_SIM_SWEEP") == "" {
		t.Skip("set SCAV_SIM_SWEEP=1")
	}
	traces := os.DirFS(tracesDir(t))
	noise := 0.0
	if v := os.Getenv("SCAV_SIM_NOISE"); v != "" {
		var err error
		if noise, err = strconv.ParseFloat(v, 64); err != nil {
			t.Fatal(err)
		}
	}
	for _, app := range BenchApps {
		for _, o := range []objective.Objective{
			{Kind: objective.Time}, {Kind: objective.Cost}, {Kind: objective.Knee},
			{Kind: objective.Cost, DeadlineS: 3600}, {Kind: objective.Time, BudgetUSD: 10},
		} {
			for _, pol := range policy.Names {
				rep, err := Run(context.Background(), Options{FS: traces, App: app, Objective: o, Policy: pol, Noise: noise, Seed: 7})
				if err != nil {
					t.Fatalf("%s %+v %s: %v", app, o, pol, err)
				}
				if rep.JCTS <= 0 || rep.CostUSD <= 0 || len(rep.History) != rep.Relaunches+1 || rep.Oracle.JCTS <= 0 {
					t.Errorf("%s %+v %s: %+v", app, o, pol, rep)
				}
				t.Logf("%-11s %-5s d=%-5.0f b=%-3.0f %-9s jct %7.0f s (oracle %7.0f) cost $%7.2f (oracle $%6.2f) relaunches %d",
					app, o.Kind, o.DeadlineS, o.BudgetUSD, pol, rep.JCTS, rep.Oracle.JCTS, rep.CostUSD, rep.Oracle.CostUSD, rep.Relaunches)
			}
		}
	}
}
