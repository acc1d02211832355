package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/report"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// TestNodeViewShowsGPUsAndEachJobsProcesses: a node's GPUs as top shows
// them, and each job's processes sorted by pid; a process whose name holds
// markup shows it as text.
func TestNodeViewShowsGPUsAndEachJobsProcesses(t *testing.T) {
	now := time.Unix(10000, 0)
	f := func(v float64) *float64 { return &v }
	u := func(v uint64) *uint64 { return &v }
	nt := report.NewNodeTracker()
	nt.Add(telemetry.NodeSample{Kind: telemetry.NodeGPU, Node: "gpu1", Time: now.Add(-time.Second), GPUs: []telemetry.GPUStat{
		{Index: 0, Name: "NVIDIA H200", Utilization: f(0.97), MemoryUsedBytes: u(60 << 30), MemoryTotalBytes: u(141 << 30), PowerWatts: f(650),
			TemperatureCelsius: f(61), Processes: []telemetry.GPUProcess{{PID: 42, Job: "train-1"}}}}})
	nt.Add(telemetry.NodeSample{Kind: telemetry.NodeHost, Node: "gpu1", Time: now.Add(-time.Second), Host: &telemetry.HostStat{
		CPUs: 16, CPUUtilization: f(0.5), Load1: 3.5, MemoryTotalBytes: 128 << 30, MemoryUsedBytes: 32 << 30,
		Jobs: []telemetry.JobUsage{{Job: "train-1", CPUCores: f(1.5), RSSBytes: 3 << 30, Processes: []telemetry.ProcessUsage{
			{PID: 43, PPID: 42, Name: "<script>x</script>", CPUCores: f(0.5), RSSBytes: 1 << 30},
			{PID: 42, PPID: 1, Name: "python3", CPUCores: f(1), RSSBytes: 2 << 30}}}}}})
	v := buildNodeView(report.BuildNodes(nt, now), now)
	if len(v.Nodes) != 1 {
		t.Fatalf("%d nodes", len(v.Nodes))
	}
	n := v.Nodes[0]
	if n.Cells.CPU != "50%/16" || n.Cells.Memory != "32G/128G" || n.Cells.GPUs != "1 GPU" || n.Cells.Age != "1s" {
		t.Errorf("node cells %+v", n.Cells)
	}
	if len(n.GPUs) != 1 || n.GPUs[0].Name != "H200" || n.GPUs[0].Util != "97%" || n.GPUs[0].Memory != "60G/141G" || n.GPUs[0].Jobs != "train-1" {
		t.Errorf("GPU %+v", n.GPUs)
	}
	if len(n.Jobs) != 1 || n.Jobs[0].CPU != "1.50" || n.Jobs[0].RSS != "3.0G" || len(n.Jobs[0].Procs) != 2 || n.Jobs[0].Procs[0].PID != 42 {
		t.Fatalf("jobs %+v", n.Jobs)
	}
	html, err := mustPages().fragment("node", "node-body", v)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, "<script>x") || !strings.Contains(html, "&lt;script&gt;x") || !strings.Contains(html, `href="/ui/job/train-1"`) {
		t.Errorf("node page:\n%s", html)
	}
}
