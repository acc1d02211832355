package daemon

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// host writes the node's host sample (none when hs is nil).
func (m metricSink) host(hs *telemetry.NodeSample, names map[string]string) {
	if hs == nil || hs.Host == nil {
		return
	}
	h, node := hs.Host, m.node
	m.gauge(descCPUs, float64(h.CPUs), node)
	m.opt(descCPUUtil, h.CPUUtilization, node)
	m.gauge(descLoad1, h.Load1, node)
	m.gauge(descMemTotal, float64(h.MemoryTotalBytes), node)
	m.gauge(descMemUsed, float64(h.MemoryUsedBytes), node)
	m.gauge(descMemAvail, float64(h.MemoryAvailableBytes), node)
	for _, n := range h.Net {
		m.counter(descNetRx, float64(n.RxBytes), node, n.Name)
		m.counter(descNetTx, float64(n.TxBytes), node, n.Name)
	}
	m.gauge(descSampleAt, unixSeconds(hs.Time), node, telemetry.NodeHost)
	for _, u := range h.Jobs {
		if !m.perJob {
			break
		}
		l := []string{u.Job, names[u.Job], node}
		m.gauge(descJobCPU, u.CPUSeconds, l...)
		m.opt(descJobCores, u.CPUCores, l...)
		m.gauge(descJobRSS, float64(u.RSSBytes), l...)
		m.gauge(descJobProcs, float64(len(u.Processes)), l...)
	}
}

// gpus writes the node's GPU sample (none when gs is nil).
func (m metricSink) gpus(gs *telemetry.NodeSample, names map[string]string) {
	if gs == nil {
		return
	}
	m.gauge(descGPUs, float64(len(gs.GPUs)), m.node, gs.Source)
	m.gauge(descSampleAt, unixSeconds(gs.Time), m.node, telemetry.NodeGPU)
	for _, g := range gs.GPUs {
		l := []string{m.node, strconv.Itoa(g.Index), g.UUID}
		mem := map[string]float64{}
		for _, p := range g.Processes {
			v := 0.0
			if p.MemoryUsedBytes != nil {
				v = float64(*p.MemoryUsedBytes)
			}
			if !m.perJob {
				p.Job = ""
			}
			mem[p.Job] += v
		}
		m.opt(descGPUUtil, g.Utilization, l...)
		for job, v := range mem {
			m.gauge(descGPUJobMem, v, append(l, job)...)
			if job != "" {
				m.gauge(descGPUJob, 1, append(l, job, names[job])...)
			}
		}
		m.opt(descGPUMemUtil, g.MemoryUtilization, l...)
		m.optUint(descGPUMemUsed, g.MemoryUsedBytes, l...)
		m.optUint(descGPUMemTot, g.MemoryTotalBytes, l...)
		m.opt(descGPUPower, g.PowerWatts, l...)
		m.opt(descGPULimit, g.PowerLimitWatts, l...)
		m.opt(descGPUTemp, g.TemperatureCelsius, l...)
		m.opt(descGPUClock, g.SMClockHertz, l...)
		if g.ECCCorrected != nil {
			m.counter(descGPUECC, float64(*g.ECCCorrected), append(l, "corrected")...)
		}
		if g.ECCUncorrected != nil {
			m.counter(descGPUECC, float64(*g.ECCUncorrected), append(l, "uncorrected")...)
		}
		if g.XIDErrors != nil {
			m.counter(descGPUXID, float64(*g.XIDErrors), l...)
		}
	}
}

// optUint writes a gauge of a count that may be unknown (nil: none).
func (m metricSink) optUint(desc *prometheus.Desc, v *uint64, labels ...string) {
	if v != nil {
		m.gauge(desc, float64(*v), labels...)
	}
}
