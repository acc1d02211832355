package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/optimizer/perf"
	"github.com/scavenger-ml/scavenger/report"
)

func newModelsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List, show and forget what your jobs measured (the model store)",
		Long: `A job under a policy stores what it measured of its command — each machine
type's step times at the configurations it ran, the gradient noise scale
along its training, its relaunches — under its signature: a hash of its
command and arguments, or the name given with scavctl run --model-key. A
later job with the same signature starts from it: it may start where the
stored model says, probes only where the model is unsure, and --policy none
reuses it without any search. Jobs with other signatures learn from it how
machine types compare. You see and forget only your own entries; root
every user's.`,
	}
	cmd.AddCommand(newModelsListCmd(a), newModelsShowCmd(a), newModelsForgetCmd(a))
	return cmd
}

func newModelsListCmd(a *app) *cobra.Command {
	var all bool
	cmd := newListCmd(a, &cobra.Command{
		Use:     "list",
		Short:   "List your model store entries: signature, machine type, jobs, what they measured",
		Example: "  scavctl models list\n  scavctl models list -o json",
	}, func(c *api.Client, ctx context.Context) ([]api.ModelEntry, error) {
		return c.Models(ctx, "", all)
	}, "SIGNATURE\tTYPE\tUSER\tJOBS\tCONFIGS\tNOISE\tRELAUNCH\tUPDATED\tFROM", func(e api.ModelEntry) string {
		noise := "-"
		if n := len(e.Noise); n > 0 {
			noise = fmt.Sprintf("%.3g→%.3g", e.Noise[0].Phi, e.Noise[n-1].Phi)
		}
		return fmt.Sprintf("%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s", e.Signature, e.Type, e.User, e.Jobs, len(e.Points), noise, relaunchText(e.RelaunchS),
			report.AgeText(time.Since(e.Updated)), truncate(e.Key, 50))
	})
	cmd.Flags().BoolVar(&all, "all", false, "every user's entries (root only)")
	return cmd
}

func newModelsShowCmd(a *app) *cobra.Command {
	var typ string
	var all bool
	cmd := &cobra.Command{
		Use:   "show SIGNATURE",
		Short: "Show a signature's stored measurements, the step-time model fitted on them, its noise and relaunches",
		Example: `  scavctl models show cmd-1f2e3d4c5b6a7980
  scavctl models show key-resnet --type g4dn.12xlarge`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			return a.withClient(cmd.Context(), func(ctx context.Context, c *api.Client) error {
				es, err := c.Models(ctx, args[0], all)
				if err != nil {
					return err
				}
				var out []api.ModelEntry
				for _, e := range es {
					if typ == "" || e.Type == typ {
						e.Earlier = nil
						out = append(out, e)
					}
				}
				if len(out) == 0 {
					return fmt.Errorf("no stored model %s%s (scavctl models list shows yours)", args[0], map[bool]string{true: " on " + typ}[typ != ""])
				}
				if asJSON {
					return a.printJSON(out)
				}
				for i, e := range out {
					if i > 0 {
						fmt.Fprintln(a.stdout)
					}
					if err := printModel(a.stdout, e); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "only this machine type")
	cmd.Flags().BoolVar(&all, "all", false, "every user's entries of the signature (root only)")
	addOutputFlag(a, cmd)
	return cmd
}

func newModelsForgetCmd(a *app) *cobra.Command {
	var typ string
	var uid int64
	cmd := &cobra.Command{
		Use:     "forget SIGNATURE",
		Short:   "Forget a signature's stored models (the next job of it searches afresh)",
		Example: "  scavctl models forget cmd-1f2e3d4c5b6a7980\n  scavctl models forget key-resnet --type local",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var who *uint32
			if uid >= 0 {
				u := uint32(uid)
				who = &u
			}
			return a.withClient(cmd.Context(), func(ctx context.Context, c *api.Client) error {
				n, err := c.ForgetModel(ctx, args[0], typ, who)
				if err != nil {
					return err
				}
				if n == 0 {
					return fmt.Errorf("no stored model %s to forget (scavctl models list shows yours)", args[0])
				}
				fmt.Fprintf(a.stdout, "forgot %d entr%s of %s\n", n, map[bool]string{true: "y", false: "ies"}[n == 1], args[0])
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "only this machine type's entry")
	cmd.Flags().Int64Var(&uid, "uid", -1, "root: forget this user's entries")
	return cmd
}

// relaunchText is the mean of measured relaunches.
func relaunchText(rs []float64) string {
	if len(rs) == 0 {
		return "-"
	}
	var s float64
	for _, r := range rs {
		s += r
	}
	return fmt.Sprintf("%.1fs", s/float64(len(rs)))
}

// printModel writes one entry: what it is, the model its points fit, the
// points with the model's prediction and interval, the noise curve.
func printModel(w io.Writer, e api.ModelEntry) error {
	fmt.Fprintf(w, "Signature %s on %s (%s), %d job(s), last %s %s ago\n  from: %s\n", e.Signature, e.Type, e.User, e.Jobs, e.Job,
		report.AgeText(time.Since(e.Updated)), e.Key)
	pts := make([]perf.Point, 0, len(e.Points))
	for _, p := range e.Points {
		pts = append(pts, perf.Point{Nodes: p.Nodes, Replicas: p.Replicas, LocalBatch: p.LocalBatch, StepTime: p.StepS, SyncTime: math.Min(p.SyncS, p.StepS)})
	}
	f, err := perf.Fit(pts)
	if err == nil {
		cv := "not validated (fewer than three configurations)"
		if !math.IsNaN(f.CV) {
			cv = fmt.Sprintf("cross-validated error %.1f %%", 100*f.CV)
		}
		fmt.Fprintf(w, "  step-time model: %s form over %d configurations, %s", f.Form(), f.Configs, cv)
		if len(f.Notes) > 0 {
			fmt.Fprintf(w, "; %s", strings.Join(f.Notes, "; "))
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  NODES\tWORKERS\tLOCAL_BATCH\tSTEPS\tSTEP_MEASURED\tSYNC\tSTEP_MODEL (90% INTERVAL)")
	for _, p := range e.Points {
		model := "-"
		if err == nil {
			lo, pt, hi := f.Interval(p.Nodes, p.Replicas, p.LocalBatch)
			model = fmt.Sprintf("%s (%s..%s)", msText(pt), msText(lo), msText(hi))
		}
		fmt.Fprintf(tw, "  %d\t%d\t%g\t%.0f\t%s\t%s\t%s\n", p.Nodes, p.Replicas, p.LocalBatch, p.Steps, msText(p.StepS), msText(p.SyncS), model)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := len(e.Noise); n > 0 {
		first, last := e.Noise[0], e.Noise[n-1]
		fmt.Fprintf(w, "  noise scale: %.4g samples after %.4g samples of training, %.4g after %.4g (%d points)\n", first.Phi, first.Samples, last.Phi, last.Samples, n)
	}
	fmt.Fprintf(w, "  relaunch: %s over %d measured\n", relaunchText(e.RelaunchS), len(e.RelaunchS))
	return nil
}

// msText is seconds in milliseconds.
func msText(s float64) string { return fmt.Sprintf("%.1fms", 1000*s) }
