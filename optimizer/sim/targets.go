package sim

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
)

// longCell is issue 14's line between long and short cells: the oracle's
// JCT in seconds.
const longCell = 15 * 60

// target is one line of the targets table.
type target struct {
	figure, policy, now, goal string
	met                       bool
	note                      string
}

// writeTargets states issue 19's targets, then issue 14's that it does not
// replace, each with its figure now, met or not and by how much, and which
// runs the figure comes from (all four: first runs; leave one app out).
func writeTargets(b *strings.Builder, cells []BenchCell, modes []ModeCell, types []TypeCell, decision time.Duration, n int) {
	var ts []target
	ts = append(ts, longTarget(cells, "scavenger"), longTarget(cells, "adaptive"), typesTarget(types, "scavenger"))
	for _, pol := range ModePolicies {
		ts = append(ts, regressionTarget(cells, pol))
	}
	for _, pol := range ModePolicies {
		ts = append(ts, secondTarget(modes, pol))
	}
	for _, pol := range ModePolicies {
		ts = append(ts, loaoTarget(modes, pol))
	}
	for _, pol := range ModePolicies {
		ts = append(ts, stepTarget(of(cells, pol), pol, "all four"), stepTarget(loaoCells(modes, pol), pol, "leave one app out"))
	}
	ms := float64(decision.Microseconds()) / 1000
	ts = append(ts, target{figure: fmt.Sprintf("one decision over %d candidates, with intervals", n), policy: "all",
		now: fmt.Sprintf("%.2f ms", ms), goal: "<= 20 ms", met: ms <= 20, note: "also `go test ./optimizer/policy -bench Decision`"})
	writeTargetTable(b, "## Against the targets (issue 19)\n\nThe live trace replay's targets are in docs/bench-loop-trace.md (`make bench-loop-trace`).\n\n", ts)

	ts = ts[:0]
	ts = append(ts, shortTarget(cells, "adaptive"))
	for _, pol := range BenchPolicies {
		ts = append(ts, fixedTarget(cells, pol))
	}
	for _, pol := range BenchPolicies {
		ts = append(ts, predTarget(cells, pol))
	}
	ts = append(ts, longTarget(cells, "scavenger+paper"), stepTarget(of(cells, "scavenger+paper"), "scavenger+paper", "all four"))
	writeTargetTable(b, "## Issue 14's other targets\n\n", ts)
	b.WriteString(missNotes)
}

// writeTargetTable writes a heading and a table of targets.
func writeTargetTable(b *strings.Builder, head string, ts []target) {
	b.WriteString(head)
	b.WriteString("| figure | policy | now | goal | met | by how much, and why |\n|---|---|---|---|---|---|\n")
	for _, t := range ts {
		met := "no"
		if t.met {
			met = "yes"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", t.figure, t.policy, t.now, t.goal, met, t.note)
	}
	b.WriteString("\n")
}

// missNotes says what limits the figures that miss, in words; they hold
// for the rules, not for these traces (nothing here is fitted to them).
const missNotes = `
### What limits the misses

- Overhead on the long first-run cells (all four) is mostly probing. Every probe is priced in the
  objective's units (relaunch into it and back, billed at all its nodes, plus its steps against the
  incumbent's) and made only while its expected improvement exceeds that; but the expected
  improvement of a machine type never measured comes from a price prior (speed per GPU in proportion
  to price, 90 % within a factor of three), and of a placement regime never measured from the
  physical bounds (anything between no scaling and perfect scaling). Those tails are wide, so on a
  job of 20 minutes to an hour several other types and regimes are worth a look, at 30 s (and, for
  cost, 30 s of every node) a probe — where the "least possible" column says what a policy that
  already knew where to go could reach. The prior's width is a statement about unseen hardware, not
  fitted here. One machine type at a time removes the types but not the regimes: the same mechanism
  probes one-node and multi-node placements of the type.
- Early probes are chosen on an immature noise forecast: the batch that is best grows with the noise
  scale, so probes and provisional moves taken in the first minutes favour batches the job then
  outgrows; the second look (scavenger, which may now probe first where its mature forecast makes
  that pay) and continuous moves (adaptive) correct the configuration, at a relaunch each.
- Leave one app out, the store holds what the three other applications measured, and of this
  application only how fast the machine types are against each other (the ratios above). Those
  ratios differ between applications by more than the price prior's factor of three, so over three
  applications their Student t interval is wider than the price prior: the store says, honestly,
  that a new application's ratio is less certain than the price prior assumes, and the job probes
  as much as on a first run, or more. Nothing here was tuned to make the figure better.
- A second run starts where its stored models say, before its first step, and probes only where
  their intervals leave room to gain. The cells it misses are short ones whose first run never
  measured the oracle's type or placement regime: the stored models predict those from the price
  prior or the physical bounds, and the choice on the pessimistic end of each interval goes to a
  configuration the first run measured. The "least possible" bound assumes a start at the default
  configuration; a second run that starts elsewhere is not held to it.
- Against the build before issue 19: the simulator now feeds the policy through the live
  controller's observer (each attempt's first steps left out, reports in whole steps) and runs the
  job on for the daemon's lead after each move decision, as a live job does. That costs every
  relaunch a few seconds, which on the shortest cells (a few minutes) is a point or more, and it
  shifts what each report sees by a few steps, so that a later probe can go another way between
  near-ties: deepspeech2/time then probes other configurations after its fifth probe and ends on one
  the traces put within a few percent of the oracle's. The search is that sensitive to when it
  looks; the live replay (docs/bench-loop-trace.md) shows the live loop takes the simulator's
  decisions when it sees the same steps.
- Decisions compare the pessimistic end of each prediction's interval (a measured configuration's
  is its measurement): a configuration is chosen on a model only when even its upper bound wins,
  otherwise it is probed first if that pays. This keeps the live loop, whose step times vary with
  the machine's load, from moving to configurations the model flatters.
- On the shortest cells (ncf) the oracle finishes in less time than one relaunch takes, so one
  relaunch is already more than the goal allows; the "least possible" column states the bound.
- Step-time error is over every never-run candidate of each fitted type, but a type is measured
  where its candidates can win (its identifiability design, pruned by value), not everywhere: its
  other placements (e.g. multi-node ones on a cost job) are extrapolated, and their predictions carry
  wide intervals and the low-confidence flag rather than being read as facts. Leave one app out the
  jobs probe other configurations than on a first run, so other placements are extrapolated.
- The decision's latency is measured on this shared 2-core machine while it runs other work: it is
  the same code as before issue 19 (predict every candidate, choose on the pessimistic totals), and
  varies with the machine's load when the document is made.
- scavenger+paper is the paper's statistical model as published: e ∝ γ/K measured on two short
  cold-start probes early in training, with no forecast; it ranks batches by early-training noise and
  is far behind on the jobs whose noise grows (deepspeech2, cifar10).
`

// of returns the cells of one bench policy.
func of(cells []BenchCell, pol string) []BenchCell {
	var out []BenchCell
	for _, c := range cells {
		if label(c.Report) == pol {
			out = append(out, c)
		}
	}
	return out
}

// overGoal is the overhead goal of a long cell for a policy: the paper's
// own figures (+13 % time, +9 % cost) for scavenger, 5 % for adaptive.
func overGoal(pol string, k objective.Kind) float64 {
	if !strings.HasPrefix(pol, "scavenger") {
		return 5
	}
	if k == objective.Cost {
		return 9
	}
	return 13
}

// longTarget scores the overhead over the oracle on the long cells
// against the paper's goal (overGoal).
func longTarget(cells []BenchCell, pol string) target {
	t := target{figure: "overhead vs oracle, cells with oracle >= 15 min (first runs: all four)", policy: pol, goal: "<= 13 % time, <= 9 % cost (the paper's)"}
	if overGoal(pol, objective.Time) == 5 {
		t.goal = "<= 5 % on each"
	}
	return overheadTarget(t, cells, pol, true, func(c BenchCell) float64 { return overGoal(pol, c.Objective) })
}

// shortTarget scores the overhead over the oracle on the short cells
// against +100 %.
func shortTarget(cells []BenchCell, pol string) target {
	t := target{figure: "overhead vs oracle, cells with oracle < 15 min", policy: pol, goal: "<= +100 % on each"}
	return overheadTarget(t, cells, pol, false, func(BenchCell) float64 { return 100 })
}

// overheadTarget fills t from pol's long (or short) cells: each cell's
// overhead over the oracle, how many meet goal, and why the others miss
// (by how much, or that no policy could: the least possible overhead is
// above the goal).
func overheadTarget(t target, cells []BenchCell, pol string, long bool, goal func(BenchCell) float64) target {
	var now, notes []string
	met, all := 0, 0
	for _, c := range of(cells, pol) {
		if (c.Report.Oracle.JCTS >= longCell) != long {
			continue
		}
		all++
		over, bound := overhead(c)
		g := goal(c)
		now = append(now, fmt.Sprintf("%s/%s %+.1f %%", c.App, c.Objective, over))
		switch {
		case over <= g:
			met++
		case bound > g:
			notes = append(notes, fmt.Sprintf("%s/%s cannot be met: the oracle takes %.0f s, one relaunch %.0f s; least possible %+.1f %%", c.App, c.Objective, c.Report.Oracle.JCTS, c.Report.RelaunchS, bound))
		default:
			notes = append(notes, fmt.Sprintf("%s/%s by %.1f points (%d relaunches; least possible %+.1f %%)", c.App, c.Objective, over-g, c.Report.Relaunches, bound))
		}
	}
	t.now, t.met = strings.Join(now, ", "), met == all
	t.note = fmt.Sprintf("%d of %d met", met, all)
	if len(notes) > 0 {
		t.note += "; missed: " + strings.Join(notes, "; ")
	}
	return t
}

func fixedTarget(cells []BenchCell, pol string) target {
	t := target{figure: ">= 2x faster (time) / >= 60 % cheaper (cost) than the median fixed candidate", policy: pol, goal: "8 of 8 (adaptive)"}
	ok, all := 0, 0
	var miss []string
	for _, c := range of(cells, pol) {
		all++
		r := c.Report
		good := r.Fixed.MedianJCTS/r.JCTS >= 2
		fig := fmt.Sprintf("%.2fx", r.Fixed.MedianJCTS/r.JCTS)
		if c.Objective == objective.Cost {
			good = -pct(r.CostUSD, r.Fixed.MedianCostUSD) >= 60
			fig = fmt.Sprintf("%.0f %% cheaper", -pct(r.CostUSD, r.Fixed.MedianCostUSD))
		}
		if good {
			ok++
		} else {
			miss = append(miss, fmt.Sprintf("%s/%s %s", c.App, c.Objective, fig))
		}
	}
	t.now, t.met = fmt.Sprintf("%d of %d", ok, all), ok == all
	if pol != "adaptive" {
		t.goal = "(goal set for adaptive)"
	}
	if len(miss) > 0 {
		t.note = "missed: " + strings.Join(miss, ", ")
	}
	return t
}

// stepTarget scores the step-time error of never-run candidates of fitted
// types over cells (from runs of kind: all four, leave one app out).
func stepTarget(cells []BenchCell, pol, kind string) target {
	var meds, p90s []float64
	for _, c := range cells {
		if e := c.Report.StepTimeError; e.N > 0 {
			meds, p90s = append(meds, e.MedianPct), append(p90s, e.P90Pct)
		}
	}
	t := target{figure: "step-time error, never-run candidates of fitted types (median over cells of each cell's median / p90; " + kind + ")", policy: pol, goal: "<= 10 % median, <= 30 % p90"}
	if len(meds) == 0 {
		t.now = "-"
		return t
	}
	sort.Float64s(meds)
	sort.Float64s(p90s)
	m, p := Quantile(meds, 0.5), Quantile(p90s, 0.5)
	t.now = fmt.Sprintf("%.1f %% / %.1f %%", m, p)
	t.met = m <= 10 && p <= 30
	if !t.met {
		t.note = fmt.Sprintf("by %.1f / %.1f points: see below", math.Max(m-10, 0), math.Max(p-30, 0))
	}
	return t
}

// loaoCells are pol's leave-one-app-out runs as bench cells.
func loaoCells(ms []ModeCell, pol string) []BenchCell {
	var out []BenchCell
	for _, m := range ms {
		if m.Policy == pol {
			out = append(out, BenchCell{App: m.App, Objective: m.Objective, Report: m.LOAO})
		}
	}
	return out
}

// loaoTarget scores the long cells' overhead with a store of the other
// applications only.
func loaoTarget(ms []ModeCell, pol string) target {
	t := target{figure: "overhead vs oracle, cells with oracle >= 15 min, leave one app out (the store holds the other three apps' first runs)", policy: pol, goal: "<= 10 % on each"}
	return overheadTarget(t, loaoCells(ms, pol), pol, true, func(BenchCell) float64 { return 10 })
}

// secondTarget scores the second runs: overhead and probes on every cell.
func secondTarget(ms []ModeCell, pol string) target {
	t := target{figure: "second run with its first run in the store: overhead vs oracle and probes, every cell", policy: pol, goal: "<= 3 % over the oracle, <= 1 probe"}
	var now, notes []string
	met, all := 0, 0
	for _, m := range ms {
		if m.Policy != pol {
			continue
		}
		all++
		r := m.Second
		o, bound := over(r, m.Objective)
		now = append(now, fmt.Sprintf("%s/%s %+.1f %% (%d)", m.App, m.Objective, o, r.Probes))
		switch {
		case o <= 3 && r.Probes <= 1:
			met++
		case r.Probes > 1:
			notes = append(notes, fmt.Sprintf("%s/%s %d probes", m.App, m.Objective, r.Probes))
		default:
			why := "the stored models' pessimistic end chose elsewhere"
			if r.StartedAt == nil {
				why = "the stored models did not move the job before its first step"
			}
			if r.Oracle.JCTS < longCell {
				why += fmt.Sprintf("; short job: the oracle takes %.0f s, a first report %.0f s", r.Oracle.JCTS, 30.0)
			}
			notes = append(notes, fmt.Sprintf("%s/%s by %.1f points (least possible from the default start %+.1f %%; %s)", m.App, m.Objective, o-3, bound, why))
		}
	}
	t.now, t.met = strings.Join(now, ", "), met == all
	t.note = fmt.Sprintf("%d of %d met (probes in brackets)", met, all)
	if len(notes) > 0 {
		t.note += "; missed: " + strings.Join(notes, "; ")
	}
	return t
}

// typesTarget scores one machine type at a time: every cell with oracle
// >= 15 min against the paper's goal.
func typesTarget(ts []TypeCell, pol string) target {
	t := target{figure: "one machine type at a time (`--types T` for each type), cells with oracle >= 15 min (all four)", policy: pol, goal: "<= 13 % time, <= 9 % cost"}
	var cells []BenchCell
	for _, c := range ts {
		if c.Policy == pol {
			cells = append(cells, BenchCell{App: c.Type + " " + c.App, Objective: c.Objective, Report: c.Report})
		}
	}
	return overheadTarget(t, cells, pol, true, func(c BenchCell) float64 { return overGoal(pol, c.Objective) })
}

// regressionTarget compares every first-run cell with the build before
// issue 19 (docs/bench-sim.md as of 047c506, kept in baseline/).
func regressionTarget(cells []BenchCell, pol string) target {
	t := target{figure: "every cell, first runs (all four), against docs/bench-sim.md before issue 19 (047c506)", policy: pol, goal: "no worse by more than 2 points"}
	before := baselineOverheads()
	var worse, better []string
	n, same := 0, 0
	for _, c := range of(cells, pol) {
		o, _ := overhead(c)
		b, ok := before[c.App+"/"+string(c.Objective)+"/"+pol]
		if !ok {
			continue
		}
		n++
		switch {
		case o > b+2:
			worse = append(worse, fmt.Sprintf("%s/%s %+.1f (was %+.1f)", c.App, c.Objective, o, b))
		case o < b-2:
			better = append(better, fmt.Sprintf("%s/%s %+.1f (was %+.1f)", c.App, c.Objective, o, b))
		default:
			same++
		}
	}
	t.met = len(worse) == 0
	t.now = fmt.Sprintf("%d of %d within 2 points, %d better, %d worse", same, n, len(better), len(worse))
	var notes []string
	if len(better) > 0 {
		notes = append(notes, "better: "+strings.Join(better, ", "))
	}
	if len(worse) > 0 {
		notes = append(notes, "worse: "+strings.Join(worse, ", ")+" (see below)")
	}
	t.note = strings.Join(notes, "; ")
	return t
}

func predTarget(cells []BenchCell, pol string) target {
	var errs []float64
	for _, c := range of(cells, pol) {
		if r := c.Report; r.PredictedJCTS > 0 {
			errs = append(errs, math.Abs(pct(r.PredictedJCTS, r.JCTS)))
		}
	}
	t := target{figure: "predicted JCT error at the committed decision (median abs over cells)", policy: pol, goal: "<= 5 %"}
	if len(errs) == 0 {
		t.now = "-"
		return t
	}
	sort.Float64s(errs)
	m := Quantile(errs, 0.5)
	t.now, t.met = fmt.Sprintf("%.1f %%", m), m <= 5
	if !t.met {
		t.note = fmt.Sprintf("by %.1f points", m-5)
	}
	return t
}
