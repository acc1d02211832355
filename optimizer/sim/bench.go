package sim

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"math"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
)

// BenchApps are the applications of shared/traces.
var BenchApps = []string{"bert", "cifar10", "deepspeech2", "ncf"}

// BenchPolicies are the policies compared side by side in the bench table.
var BenchPolicies = []string{"scavenger", "adaptive"}

// BenchCell is one (application, objective, policy) simulation.
type BenchCell struct {
	App       string
	Objective objective.Kind
	Report    *Report
}

// Bench runs every application × {time, cost} × policy over traces (a file
// system holding one directory per application) with the default types and
// catalog.
func Bench(ctx context.Context, traces fs.FS, policies []string) ([]BenchCell, error) {
	var cells []BenchCell
	for _, app := range BenchApps {
		for _, k := range []objective.Kind{objective.Time, objective.Cost} {
			for _, pol := range policies {
				rep, err := Run(ctx, Options{FS: traces, App: app, Objective: objective.Objective{Kind: k}, Policy: pol})
				if err != nil {
					return nil, fmt.Errorf("bench %s %s %s: %w", app, k, pol, err)
				}
				cells = append(cells, BenchCell{App: app, Objective: k, Report: rep})
			}
		}
	}
	return cells, nil
}

// pct is 100·(a/b − 1).
func pct(a, b float64) float64 { return 100 * (a/b - 1) }

// WriteBenchTable writes the cells as a markdown table, with the targets of
// issue 3 and the decision latency (measured by the caller, 0 to omit).
func WriteBenchTable(w io.Writer, cells []BenchCell, decision time.Duration, decisionCands int) error {
	var b strings.Builder
	b.WriteString("| app | objective | policy | oracle (type K B) | oracle JCT h | oracle $ | JCT h | $ | overhead vs oracle % | vs fixed median | relaunches | pred. JCT err % | pred. cost err % | step-time err median/p90 % (n) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range cells {
		r := c.Report
		var over, vsFixed string
		if c.Objective == objective.Cost {
			over = fmt.Sprintf("%+.1f (cost)", pct(r.CostUSD, r.Oracle.CostUSD))
			vsFixed = fmt.Sprintf("%.0f%% cheaper", -pct(r.CostUSD, r.Fixed.MedianCostUSD))
		} else {
			over = fmt.Sprintf("%+.1f (time)", pct(r.JCTS, r.Oracle.JCTS))
			vsFixed = fmt.Sprintf("%.2f× faster", r.Fixed.MedianJCTS/r.JCTS)
		}
		predJ, predC := "-", "-"
		if r.PredictedJCTS > 0 {
			predJ = fmt.Sprintf("%+.1f", pct(r.PredictedJCTS, r.JCTS))
			predC = fmt.Sprintf("%+.1f", pct(r.PredictedCostUSD, r.CostUSD))
		}
		ste := "-"
		if r.StepTimeError.N > 0 {
			ste = fmt.Sprintf("%.1f/%.1f (%d)", r.StepTimeError.MedianPct, r.StepTimeError.P90Pct, r.StepTimeError.N)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s %d %d | %.2f | %.2f | %.2f | %.2f | %s | %s | %d | %s | %s | %s |\n",
			c.App, c.Objective, r.Policy, r.Oracle.Type, r.Oracle.Workers, r.Oracle.Batch,
			r.Oracle.JCTS/3600, r.Oracle.CostUSD, r.JCTS/3600, r.CostUSD, over, vsFixed, r.Relaunches, predJ, predC, ste)
	}
	if decision > 0 {
		fmt.Fprintf(&b, "\nOne decision (predict + choose) over %d candidates: %.2f ms.\n", decisionCands, float64(decision.Microseconds())/1000)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write bench table: %w", err)
	}
	return nil
}

// abs is |x|.
func abs(x float64) float64 { return math.Abs(x) }
