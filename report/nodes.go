package report

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// This file holds the node and GPU rows of `scavctl top`, like top.go: the
// node tracker keeps the newest samples of each node (those on
// scav.node.<node>.gpu|host), BuildNodes turns them into rows, and
// nodeSection lays them out within the lines RenderTop gives it.

// topStaleAfter is the age past which a node's newest sample is marked stale
// (a daemon samples every 5 s by default), unless the node samples so seldom
// that three of its periods are longer.
const topStaleAfter = 30 * time.Second

// NodeTracker keeps the newest GPU and host samples of each node, and the
// host sample before the newest (for network rates). It keeps no clock.
type NodeTracker struct {
	nodes map[string]*nodeTrack
}

// nodeTrack is what the tracker holds of one node.
type nodeTrack struct {
	host, prevHost, gpu *telemetry.NodeSample
}

// NewNodeTracker returns a tracker that knows no node.
func NewNodeTracker() *NodeTracker { return &NodeTracker{nodes: map[string]*nodeTrack{}} }

// Add takes one sample; a sample no newer than the one held of its node and
// kind (a replayed one) is ignored.
func (t *NodeTracker) Add(s telemetry.NodeSample) {
	n := t.nodes[s.Node]
	if n == nil {
		n = &nodeTrack{}
		t.nodes[s.Node] = n
	}
	switch s.Kind {
	case telemetry.NodeHost:
		if s.Host == nil || (n.host != nil && !s.Time.After(n.host.Time)) {
			return
		}
		n.prevHost, n.host = n.host, &s
	case telemetry.NodeGPU:
		if n.gpu != nil && !s.Time.After(n.gpu.Time) {
			return
		}
		n.gpu = &s
	}
}

// TopNode is what top shows of one node.
type TopNode struct {
	Name string
	// Host is the newest host reading (nil before one), taken at HostAt.
	Host   *telemetry.HostStat
	HostAt time.Time
	// RxBps and TxBps are the network rates, in bytes per second, between
	// the two newest host readings; negative when unknown.
	RxBps, TxBps float64
	// GPUSeen says a GPU sample was received: GPUs (none on a node without
	// GPUs), taken at GPUAt.
	GPUSeen bool
	GPUs    []telemetry.GPUStat
	GPUAt   time.Time
	// Period is the time between the two newest host readings (0 before two).
	Period time.Duration
	// Error joins the newest samples' errors.
	Error string
}

// stale reports whether the node's newest sample is older, at now, than
// topStaleAfter or three of its sampling periods, whichever is longer.
func (n TopNode) stale(now time.Time) bool {
	return now.Sub(n.at()) > max(topStaleAfter, 3*n.Period)
}

// at is when the node last sampled (zero before any sample).
func (n TopNode) at() time.Time {
	if n.HostAt.After(n.GPUAt) {
		return n.HostAt
	}
	return n.GPUAt
}

// BuildNodes returns the tracker's nodes at now, sorted by name, the stale
// ones (TopNode.stale) last: those are the ones left out when the screen is
// short.
func BuildNodes(t *NodeTracker, now time.Time) []TopNode {
	var out []TopNode
	for name, n := range t.nodes {
		row := TopNode{Name: name, RxBps: -1, TxBps: -1}
		var errs []string
		if h := n.host; h != nil {
			row.Host, row.HostAt = h.Host, h.Time
			if p := n.prevHost; p != nil {
				row.Period = h.Time.Sub(p.Time)
				if dt := row.Period.Seconds(); dt > 0 &&
					h.Host.NetReceivedBytes >= p.Host.NetReceivedBytes && h.Host.NetSentBytes >= p.Host.NetSentBytes {
					row.RxBps = float64(h.Host.NetReceivedBytes-p.Host.NetReceivedBytes) / dt
					row.TxBps = float64(h.Host.NetSentBytes-p.Host.NetSentBytes) / dt
				}
			}
			if h.Error != "" {
				errs = append(errs, "host: "+h.Error)
			}
		}
		if g := n.gpu; g != nil {
			row.GPUSeen, row.GPUs, row.GPUAt = true, g.GPUs, g.Time
			if g.Error != "" {
				errs = append(errs, "gpu: "+g.Error)
			}
		}
		row.Error = strings.Join(errs, "; ")
		out = append(out, row)
	}
	sort.Slice(out, func(a, b int) bool {
		if sa, sb := out[a].stale(now), out[b].stale(now); sa != sb {
			return sb
		}
		return out[a].Name < out[b].Name
	})
	return out
}

// jobUsage sums, per job, the CPU cores and resident memory the newest host
// samples of every node attribute to it.
func jobUsage(nodes []TopNode) map[string]telemetry.JobUsage {
	out := map[string]telemetry.JobUsage{}
	for _, n := range nodes {
		if n.Host == nil {
			continue
		}
		for _, j := range n.Host.Jobs {
			u := out[j.Job]
			u.Job = j.Job
			u.RSSBytes += j.RSSBytes
			if j.CPUCores != nil {
				c := *j.CPUCores
				if u.CPUCores != nil {
					c += *u.CPUCores
				}
				u.CPUCores = &c
			}
			out[j.Job] = u
		}
	}
	return out
}

// nodeSection lays the nodes out in at most room lines (any number when
// room < 0), width characters wide: a header and a line per node, then a
// header and a line per GPU. When the GPUs do not fit, each node's GPUs
// collapse into one line; when the nodes do not fit either, the GPU lines
// go and the last node line counts the nodes left out. Fewer than 2 lines
// of room show nothing.
func nodeSection(nodes []TopNode, now time.Time, width, room int) []string {
	if len(nodes) == 0 || (room >= 0 && room < 2) {
		return nil
	}
	nodeCols := []topCol{
		{"NODE", min(max(width-58, 8), 30), true}, {"CPU", 8, false}, {"LOAD", 5, false}, {"MEM", 10, false},
		{"NET RX/TX/s", 11, false}, {"GPUS", 7, true}, {"AGE", 9, true},
	}
	gpuCols := []topCol{
		{"GPU", min(max(width-66, 8), 24), true}, {"NAME", 12, true}, {"UTIL", 4, false}, {"MEM", 9, false},
		{"POWER", 5, false}, {"TEMP", 4, false}, {"JOBS", max(width-min(max(width-66, 8), 24)-40, 4), true},
	}
	gpus, withGPUs := 0, 0
	for _, n := range nodes {
		gpus += len(n.GPUs)
		if len(n.GPUs) > 0 {
			withGPUs++
		}
	}
	full := 1 + len(nodes)
	collapsed := full
	if gpus > 0 {
		full += 1 + gpus
		collapsed += 1 + withGPUs
	}
	lines := []string{tableLine(nodeCols, colNames(nodeCols)...)}
	if room >= 0 && 1+len(nodes) > room {
		// Not even every node: as many as fit, the last line counting the rest.
		for _, n := range nodes[:room-2] {
			lines = append(lines, nodeLine(nodeCols, n, now))
		}
		return append(lines, fmt.Sprintf("+%d more node(s)", len(nodes)-(room-2)))
	}
	for _, n := range nodes {
		lines = append(lines, nodeLine(nodeCols, n, now))
	}
	switch {
	case gpus == 0:
	case room < 0 || full <= room:
		lines = append(lines, tableLine(gpuCols, colNames(gpuCols)...))
		for _, n := range nodes {
			for _, g := range n.GPUs {
				lines = append(lines, gpuLine(gpuCols, n.Name, g, n.stale(now)))
			}
		}
	case collapsed <= room:
		lines = append(lines, tableLine(gpuCols, colNames(gpuCols)...))
		for _, n := range nodes {
			if len(n.GPUs) > 0 {
				lines = append(lines, gpuSummaryLine(gpuCols, n))
			}
		}
	default:
		// The node lines count each node's GPUs; room for no more.
	}
	return lines
}

// nodeLine is a node's line: CPU busy of the CPUs, load, memory, network
// rates, its GPUs and the age of its newest sample.
func nodeLine(cols []topCol, n TopNode, now time.Time) string {
	c := n.Cells(now)
	return tableLine(cols, n.Name, c.CPU, c.Load, c.Memory, c.Network, c.GPUs, c.Age)
}

// gpuLine is one GPU's line; the jobs of a stale reading are marked so.
func gpuLine(cols []topCol, node string, g telemetry.GPUStat, stale bool) string {
	c := GPUText(g, cols[1].width)
	if stale {
		c.Jobs = "(stale) " + c.Jobs
	}
	return tableLine(cols, fmt.Sprintf("%s:%d", node, g.Index), c.Name, c.Util, c.Memory, c.Power, c.Temp, c.Jobs)
}

// gpuSummaryLine is the line of a node's GPUs collapsed: their count and
// name, mean utilisation, memory and power summed, the hottest temperature
// and every job on them.
func gpuSummaryLine(cols []topCol, n TopNode) string {
	var util, power, temp float64
	var nUtil, nPower, nTemp int
	var used, total uint64
	var procs []telemetry.GPUProcess
	name := ""
	for i, g := range n.GPUs {
		if g.Utilization != nil {
			util += *g.Utilization
			nUtil++
		}
		if g.PowerWatts != nil {
			power += *g.PowerWatts
			nPower++
		}
		if g.TemperatureCelsius != nil {
			if nTemp == 0 || *g.TemperatureCelsius > temp {
				temp = *g.TemperatureCelsius
			}
			nTemp++
		}
		if g.MemoryUsedBytes != nil {
			used += *g.MemoryUsedBytes
		}
		if g.MemoryTotalBytes != nil {
			total += *g.MemoryTotalBytes
		}
		procs = append(procs, g.Processes...)
		switch short := shortGPUName(g.Name, 99); {
		case i == 0:
			name = short
		case short != name:
			name = "mixed"
		}
	}
	k := fmt.Sprintf("%dx ", len(n.GPUs))
	cells := []string{fmt.Sprintf("%s:*", n.Name), k + shortGPUName(name, cols[1].width-len(k)), "-", "-", "-", "-", gpuJobs(procs)}
	if nUtil > 0 {
		v := util / float64(nUtil)
		cells[2] = ratioPct(&v)
	}
	if total > 0 {
		cells[3] = bytesShort(float64(used)) + "/" + bytesShort(float64(total))
	}
	if nPower > 0 {
		cells[4] = watts(&power)
	}
	if nTemp > 0 {
		cells[5] = celsius(&temp)
	}
	return tableLine(cols, cells...)
}

// collapsedSize is the number of lines nodeSection needs with every node's
// GPUs collapsed into one line.
func collapsedSize(nodes []TopNode) int {
	if len(nodes) == 0 {
		return 0
	}
	n, withGPUs := 1+len(nodes), 0
	for _, nd := range nodes {
		if len(nd.GPUs) > 0 {
			withGPUs++
		}
	}
	if withGPUs > 0 {
		n += 1 + withGPUs
	}
	return n
}
