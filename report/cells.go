package report

import (
	"fmt"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// This file holds the cells of top's rows as text: top lays them out in a
// terminal, the web dashboard in its tables, so that both show the same
// figures the same way.

// TopCells are a job's row of top as text.
type TopCells struct {
	// Config is workers x batch; Step the last step; SamplesPerS and
	// StepTime the speed over the last steps; Noise the gradient noise scale.
	Config, Step, SamplesPerS, StepTime, Noise string
	// Left and Cost are the predicted time left and cost at the finish
	// (marked ~), or what a finished job cost.
	Left, Cost string
	// CPU and RSS are what the job's processes use ("-": unknown).
	CPU, RSS string
}

// Cells is r as top writes it; interval says there is room for the 90 %
// intervals of the time and cost left.
func (r TopRow) Cells(interval bool) TopCells {
	return TopCells{Config: configText(r.Workers, r.Batch), Step: stepText(r.Step), SamplesPerS: siText(r.SamplesPerS),
		StepTime: msText(r.StepS), Noise: siText(r.Noise), Left: leftText(r, interval), Cost: costCell(r, interval),
		CPU: coresText(r.CPUCores), RSS: rssText(r.RSSBytes)}
}

// rssText is a resident memory size ("-": none measured).
func rssText(b uint64) string {
	if b == 0 {
		return "-"
	}
	return bytesShort(float64(b))
}

// NodeCells are a node's line of top as text.
type NodeCells struct {
	// CPU is the CPUs busy of how many; Load the one-minute load; Memory
	// used/total; Network received/sent per second; GPUs their count.
	CPU, Load, Memory, Network, GPUs string
	// Age is the age of the newest sample; Stale says it is stale.
	Age   string
	Stale bool
}

// Cells is n at now as top writes it.
func (n TopNode) Cells(now time.Time) NodeCells {
	c := NodeCells{CPU: "-", Load: "-", Memory: "-", Network: "-", GPUs: "-", Age: "-"}
	if h := n.Host; h != nil {
		c.CPU = fmt.Sprintf("-/%d", h.CPUs)
		if h.CPUUtilization != nil {
			c.CPU = fmt.Sprintf("%.0f%%/%d", *h.CPUUtilization*100, h.CPUs)
		}
		c.Load = loadText(h.Load1)
		c.Memory = bytesShort(float64(h.MemoryUsedBytes)) + "/" + bytesShort(float64(h.MemoryTotalBytes))
		if n.RxBps >= 0 {
			c.Network = bytesShort(n.RxBps) + "/" + bytesShort(n.TxBps)
		}
	}
	switch {
	case !n.GPUSeen: // no GPU sample yet
	case len(n.GPUs) > 0:
		c.GPUs = fmt.Sprintf("%d GPU", len(n.GPUs))
		if len(n.GPUs) > 1 {
			c.GPUs += "s"
		}
	case n.Error != "":
		c.GPUs = "GPU err"
	default:
		c.GPUs = "no GPUs"
	}
	if at := n.at(); !at.IsZero() {
		c.Age = AgeText(max(0, now.Sub(at)))
		if c.Stale = n.stale(now); c.Stale {
			c.Age = "stale " + c.Age
		}
	}
	return c
}

// GPUCells are a GPU's line of top as text.
type GPUCells struct {
	// Name is the GPU's name shortened to n characters; Util its
	// utilisation; Memory used/total; Power and Temp its readings; Jobs
	// those of the processes on it.
	Name, Util, Memory, Power, Temp, Jobs string
}

// GPUText is g as top writes it, its name in at most n characters.
func GPUText(g telemetry.GPUStat, n int) GPUCells {
	return GPUCells{Name: shortGPUName(g.Name, n), Util: ratioPct(g.Utilization), Memory: memPair(g.MemoryUsedBytes, g.MemoryTotalBytes),
		Power: watts(g.PowerWatts), Temp: celsius(g.TemperatureCelsius), Jobs: gpuJobs(g.Processes)}
}

// UsageText is a process's (or a job's) CPU cores and resident memory as
// top writes them.
func UsageText(cores *float64, rss uint64) (cpu, mem string) {
	return coresText(cores), rssText(rss)
}

// MatchJob reports whether job j passes the filters of `scavctl jobs`:
// state (a state, "active" for those not ended, or "" for any) and name
// ("" for any).
func MatchJob(j api.Job, state, name string) bool {
	return (state == "" || string(j.State) == state || state == "active" && !j.State.Done()) && (name == "" || j.Name == name)
}
