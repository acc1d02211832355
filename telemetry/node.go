package telemetry

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// NodeSchemaVersion is the version of NodeSample this build writes and reads.
const NodeSchemaVersion = 1

// MaxNodeSampleBytes bounds a node sample on the wire (many GPUs, many processes).
const MaxNodeSampleBytes = 1 << 20

// Kinds of node sample, the last token of their subject (NodeSubject).
const (
	// NodeGPU samples carry GPUs.
	NodeGPU = "gpu"
	// NodeHost samples carry Host.
	NodeHost = "host"
)

// NodeSample is one reading of a node's GPUs or of its host (CPU, memory,
// network, the jobs' processes), as published on NodeSubject(Node, Kind).
// Optional readings are pointers: absent ("[N/A]", "[Not Supported]", an
// NVML call that failed) differs from zero. Units are base units: bytes,
// watts, hertz, degrees Celsius, ratios in [0, 1].
type NodeSample struct {
	// V is the schema version; it must equal NodeSchemaVersion.
	V int `json:"v"`
	// Kind is NodeGPU or NodeHost.
	Kind string `json:"kind"`
	// Node names the node the sample was taken on.
	Node string `json:"node"`
	// Time is when the sample was taken.
	Time time.Time `json:"t"`
	// Source says where GPU readings came from: "nvml", "nvidia-smi" or "none".
	Source string `json:"source,omitempty"`
	// GPUs holds one entry per device (empty on a node without GPUs).
	GPUs []GPUStat `json:"gpus,omitempty"`
	// Host holds the host's reading (Kind NodeHost).
	Host *HostStat `json:"host,omitempty"`
	// Error says, in a sample that could not be fully taken, what failed.
	Error string `json:"error,omitempty"`
}

// GPUStat is one GPU's reading.
type GPUStat struct {
	// Index is the device's NVML index (what CUDA_VISIBLE_DEVICES names by default).
	Index int `json:"index"`
	// UUID and Name identify the device ("GPU-…", "NVIDIA H100 80GB HBM3").
	UUID string `json:"uuid,omitempty"`
	Name string `json:"name,omitempty"`
	// Utilization is the fraction of the last sample period in which a kernel ran.
	Utilization *float64 `json:"util,omitempty"`
	// MemoryUtilization is the fraction of that period the memory was read or written.
	MemoryUtilization *float64 `json:"mem_util,omitempty"`
	// MemoryUsedBytes and MemoryTotalBytes are the device memory in use and installed.
	MemoryUsedBytes  *uint64 `json:"mem_used_bytes,omitempty"`
	MemoryTotalBytes *uint64 `json:"mem_total_bytes,omitempty"`
	// PowerWatts is the power draw; PowerLimitWatts the enforced limit.
	PowerWatts      *float64 `json:"power_w,omitempty"`
	PowerLimitWatts *float64 `json:"power_limit_w,omitempty"`
	// TemperatureCelsius is the GPU core temperature.
	TemperatureCelsius *float64 `json:"temp_c,omitempty"`
	// SMClockHertz is the streaming multiprocessors' current clock.
	SMClockHertz *float64 `json:"sm_clock_hz,omitempty"`
	// ECCCorrected and ECCUncorrected count volatile ECC errors since the driver loaded.
	ECCCorrected   *uint64 `json:"ecc_corrected,omitempty"`
	ECCUncorrected *uint64 `json:"ecc_uncorrected,omitempty"`
	// XIDErrors counts critical XID events seen since the collector started
	// (NVML only); LastXID is the last one's code.
	XIDErrors *uint64 `json:"xid_errors,omitempty"`
	LastXID   *uint64 `json:"last_xid,omitempty"`
	// Processes are the compute processes on the device.
	Processes []GPUProcess `json:"processes,omitempty"`
}

// GPUProcess is a compute process on a GPU.
type GPUProcess struct {
	// PID is the process id (in the driver's PID namespace).
	PID int `json:"pid"`
	// MemoryUsedBytes is the device memory the process holds, when known.
	MemoryUsedBytes *uint64 `json:"mem_used_bytes,omitempty"`
	// Job is the Scavenger job the process belongs to, when the daemon knows.
	Job string `json:"job,omitempty"`
}

// HostStat is one reading of the host.
type HostStat struct {
	// CPUs is the number of logical CPUs.
	CPUs int `json:"cpus"`
	// CPUUtilization is the fraction of all CPUs busy since the previous
	// sample (absent in the first).
	CPUUtilization *float64 `json:"cpu_util,omitempty"`
	// Load1 is the one-minute load average.
	Load1 float64 `json:"load1"`
	// MemoryTotalBytes, MemoryUsedBytes and MemoryAvailableBytes describe RAM.
	MemoryTotalBytes     uint64 `json:"mem_total_bytes"`
	MemoryUsedBytes      uint64 `json:"mem_used_bytes"`
	MemoryAvailableBytes uint64 `json:"mem_available_bytes"`
	// NetReceivedBytes and NetSentBytes count bytes on every interface but
	// loopback since boot.
	NetReceivedBytes uint64 `json:"net_rx_bytes"`
	NetSentBytes     uint64 `json:"net_tx_bytes"`
	// Net holds each interface's counters (loopback left out): a counter of
	// its own per device, which a vanishing interface does not set back.
	Net []NetDevice `json:"net,omitempty"`
	// Jobs sums the processes of each job running on the node.
	Jobs []JobUsage `json:"jobs,omitempty"`
}

// NetDevice is one network interface's byte counters since it came up.
type NetDevice struct {
	Name    string `json:"name"`
	RxBytes uint64 `json:"rx_bytes"`
	TxBytes uint64 `json:"tx_bytes"`
}

// JobUsage is what one job's processes on the node use.
type JobUsage struct {
	// Job is the job id.
	Job string `json:"job"`
	// CPUSeconds is the CPU time (user+system) of the job's live processes.
	CPUSeconds float64 `json:"cpu_s"`
	// CPUCores is the CPU the processes used since the previous sample, in
	// cores (1.5: one and a half CPUs busy); absent in the first sample.
	CPUCores *float64 `json:"cpu_cores,omitempty"`
	// RSSBytes is the processes' resident memory.
	RSSBytes uint64 `json:"rss_bytes"`
	// Processes lists them, the job's roots and every descendant.
	Processes []ProcessUsage `json:"processes"`
}

// ProcessUsage is one process of a job.
type ProcessUsage struct {
	PID  int    `json:"pid"`
	PPID int    `json:"ppid"`
	Name string `json:"name,omitempty"`
	// CPUSeconds, CPUCores and RSSBytes as in JobUsage.
	CPUSeconds float64  `json:"cpu_s"`
	CPUCores   *float64 `json:"cpu_cores,omitempty"`
	RSSBytes   uint64   `json:"rss_bytes"`
}

// Encode returns the sample as JSON, stamped with NodeSchemaVersion.
func (s NodeSample) Encode() []byte {
	s.V = NodeSchemaVersion
	b, _ := json.Marshal(s)
	return b
}

// DecodeNodeSample parses and validates a node sample. It never panics.
func DecodeNodeSample(b []byte) (NodeSample, error) {
	var s NodeSample
	if len(b) > MaxNodeSampleBytes {
		return NodeSample{}, fmt.Errorf("decode node sample: %d bytes exceeds %d", len(b), MaxNodeSampleBytes)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return NodeSample{}, fmt.Errorf("decode node sample: %w", err)
	}
	if s.V != NodeSchemaVersion {
		return NodeSample{}, fmt.Errorf("decode node sample: schema version %d, this build reads %d", s.V, NodeSchemaVersion)
	}
	if err := s.Validate(); err != nil {
		return NodeSample{}, fmt.Errorf("decode node sample: %w", err)
	}
	return s, nil
}

// Validate checks a sample's fields.
func (s *NodeSample) Validate() error {
	switch {
	case s.Kind != NodeGPU && s.Kind != NodeHost:
		return fmt.Errorf("kind %q is neither %q nor %q", s.Kind, NodeGPU, NodeHost)
	case !ValidNodeName(s.Node):
		return fmt.Errorf("node %q is not a node name", s.Node)
	case s.Time.IsZero():
		return fmt.Errorf("no time")
	case s.Kind == NodeHost && s.Host == nil:
		return fmt.Errorf("host sample without host reading")
	}
	for i, g := range s.GPUs {
		if g.Index < 0 {
			return fmt.Errorf("gpu %d: index %d < 0", i, g.Index)
		}
		for _, f := range []struct {
			name string
			v    *float64
			hi   float64
		}{
			{"util", g.Utilization, 1}, {"mem_util", g.MemoryUtilization, 1},
			{"power_w", g.PowerWatts, math.MaxFloat64}, {"power_limit_w", g.PowerLimitWatts, math.MaxFloat64},
			{"sm_clock_hz", g.SMClockHertz, math.MaxFloat64},
		} {
			if f.v != nil && !(*f.v >= 0 && *f.v <= f.hi) {
				return fmt.Errorf("gpu %d: %s %v out of range", g.Index, f.name, *f.v)
			}
		}
		if g.TemperatureCelsius != nil && (math.IsNaN(*g.TemperatureCelsius) || math.IsInf(*g.TemperatureCelsius, 0)) {
			return fmt.Errorf("gpu %d: temp_c is not finite", g.Index)
		}
	}
	if h := s.Host; h != nil {
		if h.CPUUtilization != nil && !(*h.CPUUtilization >= 0 && *h.CPUUtilization <= 1) {
			return fmt.Errorf("host: cpu_util %v out of [0, 1]", *h.CPUUtilization)
		}
		for _, j := range h.Jobs {
			if !ValidJobID(j.Job) {
				return fmt.Errorf("host: job %q is not a job id", j.Job)
			}
		}
		for _, n := range h.Net {
			if n.Name == "" || len(n.Name) > 64 {
				return fmt.Errorf("host: network interface name %q", n.Name)
			}
		}
	}
	return nil
}

// ValidNodeName reports whether s can name a node in a NATS subject: 1 to
// 128 characters, none of them '.', '*', '>' or white space.
func ValidNodeName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.' || c == '*' || c == '>' || c <= ' ' || c == 0x7f:
			return false
		}
	}
	return true
}

// SubjectNode turns a host name into a node name usable in a subject: dots
// become underscores ("gpu01.cluster" -> "gpu01_cluster"), so do other
// characters NATS reserves.
func SubjectNode(host string) string {
	b := []byte(host)
	for i, c := range b {
		if c == '.' || c == '*' || c == '>' || c <= ' ' || c == 0x7f {
			b[i] = '_'
		}
	}
	if len(b) > 128 {
		b = b[:128]
	}
	if len(b) == 0 {
		return "node"
	}
	return string(b)
}
