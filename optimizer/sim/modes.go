package sim

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"strings"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/prior"
)

// How the bench judges what transfers (issue 19)
//
// The first-run cells (Bench) start with an empty store: every figure
// there is the same code scored on all four applications ("all four").
// Two more runs of each cell start from a store filled by first runs:
//
//   - leave one app out: the store holds the first runs (both objectives)
//     of the three other applications only, so the job learns from them
//     nothing of its own, only how machine types compare across
//     applications — how a new application is scored;
//   - second run: the store holds the cell's own first run, as when the
//     same command runs again.
//
// And every first-run cell again with one machine type at a time
// (`--types T`, the paper's own setting).

// ModePolicies are the policies scored with a store and one type at a time.
var ModePolicies = []string{"scavenger", "adaptive"}

// ModeCell is one cell scored in the three ways that start from a store,
// beside its first run.
type ModeCell struct {
	App       string
	Objective objective.Kind
	Policy    string
	First     *Report
	// LOAO starts from the other applications' first runs; Second from
	// its own.
	LOAO, Second *Report
}

// BenchModes scores every first-run cell of ModePolicies leave-one-app-out
// and as a second run (see the comment above).
func BenchModes(ctx context.Context, traces fs.FS, first []BenchCell) ([]ModeCell, error) {
	learned := map[string]map[string][]prior.Entry{} // policy → app → entries
	for _, c := range first {
		pol := label(c.Report)
		if learned[pol] == nil {
			learned[pol] = map[string][]prior.Entry{}
		}
		learned[pol][c.App] = MergeStore(learned[pol][c.App], c.Report.Learned)
	}
	var out []ModeCell
	for _, c := range first {
		pol := label(c.Report)
		if !slices.Contains(ModePolicies, pol) {
			continue
		}
		var others []prior.Entry
		for app, es := range learned[pol] {
			if app != c.App {
				others = append(others, es...)
			}
		}
		opts := Options{FS: traces, App: c.App, Objective: objective.Objective{Kind: c.Objective}, Policy: pol}
		m := ModeCell{App: c.App, Objective: c.Objective, Policy: pol, First: c.Report}
		var err error
		opts.Store = others
		if m.LOAO, err = Run(ctx, opts); err != nil {
			return nil, fmt.Errorf("bench %s %s %s leave one app out: %w", c.App, c.Objective, pol, err)
		}
		opts.Store = c.Report.Learned
		if m.Second, err = Run(ctx, opts); err != nil {
			return nil, fmt.Errorf("bench %s %s %s second run: %w", c.App, c.Objective, pol, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// TypeCell is one first-run cell with one machine type.
type TypeCell struct {
	Type, App string
	Objective objective.Kind
	Policy    string
	Report    *Report
}

// BenchTypes scores every application × objective × ModePolicies with one
// of DefaultTypes at a time.
func BenchTypes(ctx context.Context, traces fs.FS) ([]TypeCell, error) {
	var out []TypeCell
	for _, typ := range DefaultTypes {
		for _, app := range BenchApps {
			for _, k := range []objective.Kind{objective.Time, objective.Cost} {
				for _, pol := range ModePolicies {
					rep, err := Run(ctx, Options{FS: traces, App: app, Types: []string{typ}, Objective: objective.Objective{Kind: k}, Policy: pol})
					if err != nil {
						return nil, fmt.Errorf("bench %s on %s %s %s: %w", app, typ, k, pol, err)
					}
					out = append(out, TypeCell{Type: typ, App: app, Objective: k, Policy: pol, Report: rep})
				}
			}
		}
	}
	return out, nil
}

// over is a report's overhead over its oracle in the objective's terms,
// and the least any policy could have had.
func over(r *Report, k objective.Kind) (pct, bound float64) {
	return overhead(BenchCell{Objective: k, Report: r})
}

// runText is a run's overhead with its relaunches and probes.
func runText(r *Report, k objective.Kind) string {
	o, _ := over(r, k)
	s := fmt.Sprintf("%+.1f (%d/%d)", o, r.Relaunches, r.Probes)
	if r.StartedAt != nil {
		s += " s"
	}
	return s
}

// steText is a run's step-time error.
func steText(r *Report) string {
	if r.StepTimeError.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f/%.1f", r.StepTimeError.MedianPct, r.StepTimeError.P90Pct)
}

// writeModes writes the leave-one-app-out and second-run table.
func writeModes(b *strings.Builder, ms []ModeCell, first []BenchCell) {
	b.WriteString("## From a store: leave one app out, and second runs\n\n")
	b.WriteString("Overhead vs the oracle in % (relaunches/probes; \"s\": the stored models started the job elsewhere before its first step). " +
		"First run: empty store (all four). Leave one app out: the store holds the other three applications' first runs (both objectives). " +
		"Second run: the store holds this cell's own first run. Step-time error median/p90 % as in the table above.\n\n")
	b.WriteString("| app | objective | policy | oracle JCT h | first run | leave one app out | second run | step-time err first | step-time err leave one out |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range ms {
		fmt.Fprintf(b, "| %s | %s | %s | %.2f | %s | %s | %s | %s | %s |\n", m.App, m.Objective, m.Policy, m.First.Oracle.JCTS/3600,
			runText(m.First, m.Objective), runText(m.LOAO, m.Objective), runText(m.Second, m.Objective), steText(m.First), steText(m.LOAO))
	}
	b.WriteString("\n")
	writeRatios(b, first)
}

// writeRatios writes the speed ratios between machine types each
// application's first runs measured (what a store of it tells another
// application), beside the catalog's price ratio per GPU.
func writeRatios(b *strings.Builder, first []BenchCell) {
	by := map[string][]prior.Entry{}
	for _, c := range first {
		if label(c.Report) == ModePolicies[0] {
			by[c.App] = MergeStore(by[c.App], c.Report.Learned)
		}
	}
	b.WriteString("What a store of one application tells another of the machine types: the step-time ratio of each pair that its first runs (" +
		ModePolicies[0] + ", both objectives) measured, each type's model fitted on its measurements and compared where either was measured (optimizer/prior).\n\n")
	b.WriteString("| ratio |")
	for _, app := range BenchApps {
		b.WriteString(" " + app + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(BenchApps)) + "\n")
	for i, x := range DefaultTypes {
		for _, y := range DefaultTypes[i+1:] {
			fmt.Fprintf(b, "| %s over %s |", y, x)
			for _, app := range BenchApps {
				r, ok := prior.For("", by[app]).Speed[[2]string{x, y}]
				if ok {
					fmt.Fprintf(b, " %.2f |", math.Exp(r.LogMean))
				} else {
					b.WriteString(" - |")
				}
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n")
}

// writeTypes writes the one-type-at-a-time table.
func writeTypes(b *strings.Builder, ts []TypeCell) {
	b.WriteString("## One machine type at a time (`--types T`, the paper's own setting)\n\n")
	b.WriteString("Overhead vs that type's oracle in % (relaunches/probes), first runs (all four); \"least possible\" as above.\n\n")
	b.WriteString("| type | app | objective | oracle (K B) | oracle JCT h | least possible % |")
	for _, p := range ModePolicies {
		b.WriteString(" " + p + " |")
	}
	b.WriteString("\n|---|---|---|---|---|---|" + strings.Repeat("---|", len(ModePolicies)) + "\n")
	for i := 0; i < len(ts); i += len(ModePolicies) {
		t := ts[i]
		_, bound := over(t.Report, t.Objective)
		fmt.Fprintf(b, "| %s | %s | %s | %d %d | %.2f | %+.1f |", t.Type, t.App, t.Objective, t.Report.Oracle.Workers, t.Report.Oracle.Batch, t.Report.Oracle.JCTS/3600, bound)
		for _, u := range ts[i : i+len(ModePolicies)] {
			b.WriteString(" " + runText(u.Report, u.Objective) + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}
