package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/internal/words"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/plot"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/optimizer/price"
	"github.com/scavenger-ml/scavenger/optimizer/prior"
	"github.com/scavenger-ml/scavenger/optimizer/sim"
)

// simFlags are the flags sim and plan share: which traces, which types,
// which objective, at which prices.
type simFlags struct {
	trace     string
	types     []string
	objective string
	deadline  time.Duration
	budget    float64
	prices    string
	penalty   time.Duration
}

func (f *simFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.trace, "trace", "", "an application's trace directory, e.g. traces/cifar10 (required)")
	fl.StringSliceVar(&f.types, "types", []string{"aws", "azure", "dgx-ext"}, "machine types of the traces to use (the trace files' suffixes)")
	fl.StringVar(&f.objective, "objective", "time", "what to optimise: time, cost or knee")
	fl.DurationVar(&f.deadline, "deadline", 0, "with --objective cost: the job must finish within this time")
	fl.Float64Var(&f.budget, "budget", 0, "with --objective time: the job must cost at most this many USD")
	fl.StringVar(&f.prices, "prices", "", "a price file that overrides or extends the embedded catalog (see scavctl prices)")
	fl.DurationVar(&f.penalty, "relaunch-penalty", 30*time.Second, "time one configuration change costs (billed, no progress)")
}

// read reads -o (whether to print JSON) and the flags' simulator options.
func (f *simFlags) read(a *app) (asJSON bool, opts sim.Options, err error) {
	if asJSON, err = a.json(); err != nil {
		return false, opts, err
	}
	opts, err = f.options()
	return asJSON, opts, err
}

// options turns the flags into simulator options, collecting every problem.
func (f *simFlags) options() (sim.Options, error) {
	var errs []error
	if f.trace == "" {
		errs = append(errs, errors.New(`required flag(s) "trace" not set`))
	}
	kind, err := objective.ParseKind(f.objective)
	if err != nil {
		errs = append(errs, fmt.Errorf("--objective: %w", err))
	}
	if f.deadline < 0 || f.budget < 0 || f.penalty < 0 {
		errs = append(errs, errors.New("--deadline, --budget and --relaunch-penalty must not be negative"))
	}
	cat, err := price.WithOverride(f.prices)
	if err != nil {
		errs = append(errs, fmt.Errorf("--prices: %w", err))
	}
	return sim.Options{
		TraceDir:        f.trace,
		Types:           f.types,
		Objective:       objective.Objective{Kind: kind, DeadlineS: f.deadline.Seconds(), BudgetUSD: f.budget},
		RelaunchPenalty: f.penalty,
		Catalog:         cat,
	}, errors.Join(errs...)
}

func newSimCmd(a *app) *cobra.Command {
	var f simFlags
	var pol, start, plotFile, stat string
	var storeFrom []string
	var noise float64
	var seed uint64
	cmd := &cobra.Command{
		Use:   "sim --trace DIR [flags]",
		Short: "Replay measured GPU traces as a live job and score a policy against the oracle",
		Long: `sim replays one application's measured traces (step times of every machine
type, worker count and batch size; the gradient statistics along training) as
a live job: the policy sees only the telemetry the python client would send,
decides, and the job moves, paying the relaunch penalty. It reports the job's
time and cost against the oracle (the best fixed configuration, knowing every
trace) and the median fixed configuration, and how well the policy predicted.

--store-from fills a simulated model store first, with a run over each
application's traces given (its signature is the application's name): the
job then starts from what the store knows of its own application (a second
run, when --trace is among them) and of how machine types compare (the
others'), as a live job starts from scavd's model store (scavctl models).`,
		Example: `  scavctl sim --trace traces/cifar10 --objective cost --policy adaptive
  scavctl sim --trace traces/cifar10 --store-from traces/cifar10        # a second run
  scavctl sim --trace traces/cifar10 --store-from traces/bert --store-from traces/ncf
  scavctl sim --trace traces/cifar10 --objective time --budget 5 -o json
  scavctl sim --trace traces/cifar10 --policy scavenger --plot front.svg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, opts, err := f.read(a)
			if err != nil {
				return err
			}
			if start != "" {
				typ, k, b, err := words.ParseNotation(start, true)
				if err != nil {
					return fmt.Errorf("--start: %w", err)
				}
				start = fmt.Sprintf("%s:%d:%d", typ, k, b)
			}
			opts.Policy, opts.Start, opts.Noise, opts.Seed, opts.StatModel = pol, start, noise, seed, stat
			if opts.Store, err = fillStore(cmd.Context(), opts, storeFrom); err != nil {
				return err
			}
			rep, err := sim.Run(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if plotFile != "" {
				if err := plot.Front(rep, plotFile); err != nil {
					return err
				}
			}
			if asJSON {
				return a.printJSON(rep)
			}
			return printSim(a.stdout, rep)
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&pol, "policy", "adaptive", "policy: "+strings.Join(policy.Names, ", "))
	cmd.Flags().StringVar(&start, "start", "", "starting configuration in the notation TYPE KxB, e.g. \"aws 1x128\" (default: the first type, its fewest workers, the smallest batch)")
	cmd.Flags().StringVar(&plotFile, "plot", "", "also draw the time-cost front of every candidate, the oracle and the outcome (.svg, .png or .pdf)")
	cmd.Flags().StringVar(&stat, "stat-model", "", "statistical model: adaptdl (default: AdaScale gain with the noise forecast) or paper (Scavenger's γ/K and e = e*+θγ from two cold-start probes)")
	cmd.Flags().Float64Var(&noise, "noise", 0, "relative noise on the telemetry the policy sees (e.g. 0.1)")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the telemetry noise")
	cmd.Flags().StringArrayVar(&storeFrom, "store-from", nil, "first fill the simulated model store from a run over this application's traces (repeatable): other applications' make a first run with a universal store, --trace's own a second run")
	addOutputFlag(a, cmd)
	return cmd
}

// fillStore is the simulated model store after a run over each of dirs in
// turn (the job's signature is its application's name): under opts'
// policy, or scavenger for one that learns nothing of its own (fixed, none),
// with opts' objective and types, each starting from the store the ones
// before filled.
func fillStore(ctx context.Context, opts sim.Options, dirs []string) ([]prior.Entry, error) {
	var store []prior.Entry
	for _, dir := range dirs {
		o := opts
		o.TraceDir, o.FS, o.App, o.Store, o.Start = dir, nil, "", store, ""
		if o.Policy == "fixed" || o.Policy == "none" {
			o.Policy = "scavenger"
		}
		_, next, err := sim.Learn(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("--store-from %s: %w", dir, err)
		}
		store = next
	}
	return store, nil
}

func printSim(w io.Writer, r *sim.Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) {
		fmt.Fprintf(tw, "%s:\t"+format+"\n", append([]any{k}, args...)...)
	}
	row("Application", "%s, %d candidates, objective %s, policy %s", r.App, r.Candidates, r.Objective, r.Policy)
	row("Outcome", "%s, $%.2f, %s of %.0fs, %d of them probes", hours(r.JCTS), r.CostUSD, words.Count(r.Relaunches, "relaunch"), r.RelaunchS, r.Probes)
	if s := r.StartedAt; s != nil {
		row("Started at", "%s, where the stored model said", words.NotationOn(s.Type, s.Nodes, s.Workers, s.Batch))
	}
	if r.PredictedJCTS > 0 {
		row("Predicted", "%s, $%.2f (at the last decision)", hours(r.PredictedJCTS), r.PredictedCostUSD)
	}
	row("Oracle", "%s: %s, $%.2f", words.NotationOn(r.Oracle.Type, r.Oracle.Nodes, r.Oracle.Workers, r.Oracle.Batch), hours(r.Oracle.JCTS), r.Oracle.CostUSD)
	row("vs oracle", "%+.1f%% time, %+.1f%% cost", pct(r.JCTS, r.Oracle.JCTS), pct(r.CostUSD, r.Oracle.CostUSD))
	row("Median fixed", "%s, $%.2f (over %d candidates)", hours(r.Fixed.MedianJCTS), r.Fixed.MedianCostUSD, r.Fixed.Count)
	if r.StepTimeError.N > 0 {
		row("Step-time error", "median %.1f%%, p90 %.1f%% over %d never-run candidates of the fitted types (%s)", r.StepTimeError.MedianPct, r.StepTimeError.P90Pct, r.StepTimeError.N, strings.Join(r.FittedTypes, ", "))
	}
	row("Last reason", "%s", words.Renotate(r.Reason))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nHistory:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  START\tTYPE\tNODES\tWORKERS\tBATCH\tSTEPS")
	for _, s := range r.History {
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%d\t%.0f\n", hours(s.StartS), s.Type, s.Nodes, s.Workers, s.Batch, s.Steps)
	}
	return tw.Flush()
}

func newPlanCmd(a *app) *cobra.Command {
	var f simFlags
	var cf cloudPlanFlags
	var top int
	var pol, stat string
	cmd := &cobra.Command{
		Use:   "plan (--trace DIR | --launcher cloudvm) [flags]",
		Short: "Show every candidate configuration with its predicted step time, time and cost",
		Long: `plan lists the candidates of an application's traces — machine type, nodes,
workers, global batch — with the step time, the time to finish the whole job
and its cost, best first for the objective (the knee's distance for knee).

Without --policy the figures are the traces' own (measured). With --policy,
plan shows what that policy predicted at the end of a simulated run: each
step time with its 90 % interval beside the measured one, and the flags that
say not to read it as a fact — low-confidence (the interval spans more than
±25 %: the model was not validated there) and non-monotone (against its
neighbours, the step time falls as the local batch grows, or a sample costs
more).

With --launcher cloudvm, plan is a dry run of a cloud job: it asks the scavd
that runs launcher cloudvm (or one it starts) for the machine types offered
now and lists the candidates a job with these bounds (--types, --spot,
--max-price, --workers, --batch-size) would choose among, each with the
market it would be bought in, its machines, what it would pay an hour and
its minimum bill, cheapest first, before any instance exists.`,
		Example: "  scavctl plan --trace traces/cifar10 --objective cost --top 10\n  scavctl plan --trace traces/cifar10 --objective cost --policy adaptive --top 20\n" +
			"  scavctl plan --launcher cloudvm --types loc.half,loc.full --spot --workers 1:4 --batch-size 32:128",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.launcher = cf.launcher; a.launcher == "cloudvm" {
				cf.types, cf.typesWereGiven, cf.objectiveOfPlan = f.types, cmd.Flags().Changed("types"), f.objective
				return a.planCloud(cmd.Context(), cf, top)
			}
			asJSON, opts, err := f.read(a)
			if err != nil {
				return err
			}
			var rows []sim.PlanRow
			if pol == "" {
				rows, err = sim.Plan(cmd.Context(), opts)
			} else {
				opts.Policy, opts.StatModel = pol, stat
				rows, err = sim.PlanPredicted(cmd.Context(), opts)
			}
			if err != nil {
				return err
			}
			if top > 0 && len(rows) > top {
				rows = rows[:top]
			}
			if asJSON {
				return a.printJSON(rows)
			}
			return sim.WritePlan(a.stdout, rows)
		},
	}
	f.add(cmd)
	cf.add(cmd)
	cmd.Flags().IntVar(&top, "top", 0, "show only the best N (0: all)")
	cmd.Flags().StringVar(&pol, "policy", "", "show what this policy predicted at the end of a simulated run, with intervals and flags, instead of the traces' figures")
	cmd.Flags().StringVar(&stat, "stat-model", "", "with --policy: its statistical model (adaptdl or paper)")
	addOutputFlag(a, cmd)
	return cmd
}

func newPricesCmd(a *app) *cobra.Command {
	var file string
	var live liveFlags
	cmd := &cobra.Command{
		Use:   "prices",
		Short: "Show the machine-type price catalog",
		Long: `prices shows the machine types Scavenger can price: provider, GPUs, vCPUs,
memory, on-demand and spot $/hour, region, and where and when each price was
read. --file merges a catalog of your own (the same JSON as -o json prints)
over the embedded one; the same file is accepted by sim and plan as --prices.

--live shows a cloud provider's spot prices now, per type and zone, next to
the catalog's on-demand and spot prices: aws asks EC2
(DescribeSpotPriceHistory, with the SDK's credentials and region); local
shows what the running cloudvm scavd's local cloud offers now (or --catalog
FILE's).`,
		Example: `  scavctl prices
  scavctl prices --live --provider aws --region us-east-1 --zones us-east-1a,us-east-1b --types g4dn.12xlarge
  scavctl prices --live --provider local`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			cat, err := price.WithOverride(file)
			if err != nil {
				return err
			}
			if live.live {
				rows, err := live.livePrices(cmd.Context(), a, cat)
				if err != nil {
					return err
				}
				if asJSON {
					return a.printJSON(rows)
				}
				return writeLiveTable(a.stdout, rows)
			}
			if asJSON {
				return a.printJSON(cat)
			}
			return price.WriteTable(a.stdout, cat.Rows())
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "a catalog file to merge over the embedded one")
	live.add(cmd)
	addOutputFlag(a, cmd)
	return cmd
}

func hours(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}

func pct(v, ref float64) float64 {
	if ref == 0 {
		return 0
	}
	return 100 * (v - ref) / ref
}
