package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/telemetry"
)

func newNodeCmd(a *app) *cobra.Command {
	var follow bool
	var kind string
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "node [NODE]",
		Short: "Print node samples: GPUs and host (CPU, memory, network, jobs' processes)",
		Long: `node prints the samples node daemons take of their GPUs (utilisation, memory,
power, temperature, SM clock, ECC and XID errors, the processes on each device
and their jobs) and of their host (CPU, memory, network, and the CPU and memory
of each job's processes): the newest of each node and kind, or with --since
those of that long. Without NODE it prints every node's. With -f it keeps
printing new samples; with -o json it prints one JSON sample per line, as
published on scav.node.<node>.gpu and scav.node.<node>.host.`,
		Example: "  scavctl node\n  scavctl node gpu01 --kind gpu -f\n  scavctl node --since 10m -o json",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			switch kind {
			case "", "all":
				kind = ""
			case telemetry.NodeGPU, telemetry.NodeHost:
			default:
				return fmt.Errorf("--kind %q: use gpu, host or all", kind)
			}
			node := ""
			if len(args) == 1 {
				node = args[0]
			}
			return a.withClient(cmd.Context(), func(ctx context.Context, c *api.Client) error {
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				enc := json.NewEncoder(a.stdout)
				show := func(s telemetry.NodeSample) error {
					if node != "" && s.Node != telemetry.SubjectNode(node) || kind != "" && s.Kind != kind {
						return nil
					}
					if asJSON {
						return enc.Encode(s)
					}
					printNodeSample(tw, s)
					if follow {
						return tw.Flush()
					}
					return nil
				}
				var err error
				switch {
				case since > 0 && follow:
					err = c.NodeSamples(ctx, node, kind, true, func(s telemetry.NodeSample) error {
						if s.Time.Before(time.Now().Add(-since)) {
							return nil
						}
						return show(s)
					})
				case since > 0:
					err = c.NodeSamplesSince(ctx, kind, time.Now().Add(-since), show)
				default:
					err = c.LatestNodeSamples(ctx, follow, show)
				}
				if ferr := tw.Flush(); err == nil {
					err = ferr
				}
				return err
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new samples (Ctrl-C to stop)")
	cmd.Flags().StringVar(&kind, "kind", "all", "samples to print: gpu, host or all")
	cmd.Flags().DurationVar(&since, "since", 0, "the samples taken within this long (default: the newest of each node and kind)")
	addOutputFlag(a, cmd)
	return cmd
}

// printNodeSample writes one line per GPU of a GPU sample, and a line for
// the host and one per job of a host sample.
func printNodeSample(w io.Writer, s telemetry.NodeSample) {
	at := s.Time.Local().Format("15:04:05")
	switch s.Kind {
	case telemetry.NodeHost:
		h := s.Host
		fmt.Fprintf(w, "%s\t%s\thost\tcpu %s of %d\tload %.2f\tmem %s/%s\tnet rx %s tx %s\t%d job(s)\n", at, s.Node,
			ratioPct(h.CPUUtilization), h.CPUs, h.Load1, bytesIEC(float64(h.MemoryUsedBytes)), bytesIEC(float64(h.MemoryTotalBytes)),
			bytesIEC(float64(h.NetReceivedBytes)), bytesIEC(float64(h.NetSentBytes)), len(h.Jobs))
		for _, j := range h.Jobs {
			cores := "-"
			if j.CPUCores != nil {
				cores = strconv.FormatFloat(*j.CPUCores, 'f', 2, 64)
			}
			fmt.Fprintf(w, "%s\t%s\tjob %s\tcpu %s cores\trss %s\t%d process(es)\t\t\n", at, s.Node, j.Job, cores, bytesIEC(float64(j.RSSBytes)), len(j.Processes))
		}
	case telemetry.NodeGPU:
		if len(s.GPUs) == 0 {
			fmt.Fprintf(w, "%s\t%s\tgpu\tno GPUs (%s)\t\t\t\t\n", at, s.Node, s.Source)
		}
		for _, g := range s.GPUs {
			jobs := map[string]bool{}
			var pids []string
			for _, p := range g.Processes {
				pids = append(pids, strconv.Itoa(p.PID))
				if p.Job != "" {
					jobs[p.Job] = true
				}
			}
			js := slices.Sorted(maps.Keys(jobs))
			fmt.Fprintf(w, "%s\t%s\tgpu %d\tutil %s\tmem %s/%s\t%s %s %s\tpids %s jobs %s\n", at, s.Node, g.Index,
				ratioPct(g.Utilization), bytesPtr(g.MemoryUsedBytes), bytesPtr(g.MemoryTotalBytes),
				unit(g.PowerWatts, 1, "W"), unit(g.TemperatureCelsius, 1, "C"), unit(g.SMClockHertz, 1e6, "MHz"),
				dash(strings.Join(pids, ",")), dash(strings.Join(js, ",")))
		}
	}
	if s.Error != "" {
		fmt.Fprintf(w, "%s\t%s\t%s\terror: %s\t\t\t\t\n", at, s.Node, s.Kind, s.Error)
	}
}

func ratioPct(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", *v*100)
}

func unit(v *float64, div float64, u string) string {
	if v == nil {
		return "-" + u
	}
	return fmt.Sprintf("%.0f%s", *v/div, u)
}

func bytesPtr(v *uint64) string {
	if v == nil {
		return "-"
	}
	return bytesIEC(float64(*v))
}

func bytesIEC(v float64) string {
	for _, u := range []string{"B", "KiB", "MiB", "GiB"} {
		if v < 1024 {
			return fmt.Sprintf("%.0f%s", v, u)
		}
		v /= 1024
	}
	return fmt.Sprintf("%.1fTiB", v)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
