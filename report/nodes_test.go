package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// recordedGPUs reads a GPU reading the GPU collector's tests recorded
// (telemetry/gpu/testdata) and gives its processes to jobs in turn.
func recordedGPUs(t *testing.T, name string, jobs ...string) []telemetry.GPUStat {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "telemetry", "gpu", "testdata", name+".golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var gpus []telemetry.GPUStat
	if err := json.Unmarshal(b, &gpus); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	k := 0
	for i := range gpus {
		for p := range gpus[i].Processes {
			if len(jobs) > 0 {
				gpus[i].Processes[p].Job = jobs[k%len(jobs)]
				k++
			}
		}
	}
	return gpus
}

func ptr[T any](v T) *T { return &v }

// hostAt is a host sample of node taken ago before topNow; rx and tx are its
// network counters.
func hostAt(node string, ago time.Duration, rx, tx uint64, jobs ...telemetry.JobUsage) telemetry.NodeSample {
	return telemetry.NodeSample{Kind: telemetry.NodeHost, Node: node, Time: topNow.Add(-ago), Host: &telemetry.HostStat{
		CPUs: 128, CPUUtilization: ptr(0.634), Load1: 81.37, MemoryTotalBytes: 2 << 40, MemoryUsedBytes: 412 << 30,
		MemoryAvailableBytes: 1600 << 30, NetReceivedBytes: rx, NetSentBytes: tx, Jobs: jobs,
	}}
}

func gpuAt(node string, ago time.Duration, gpus []telemetry.GPUStat) telemetry.NodeSample {
	return telemetry.NodeSample{Kind: telemetry.NodeGPU, Node: node, Time: topNow.Add(-ago), Source: "nvml", GPUs: gpus}
}

// nodesOf folds samples into a tracker and returns its nodes.
func nodesOf(samples ...telemetry.NodeSample) []TopNode {
	tr := NewNodeTracker()
	for _, s := range samples {
		tr.Add(s)
	}
	return BuildNodes(tr, topNow)
}

// withNodes is frame f with nodes, the jobs' CPU and memory taken from them.
func withNodes(f TopFrame, nodes []TopNode) TopFrame {
	f.Nodes = nodes
	u := jobUsage(nodes)
	for i, r := range f.Jobs {
		if j, ok := u[r.ID]; ok && r.Active {
			f.Jobs[i].CPUCores, f.Jobs[i].RSSBytes = j.CPUCores, j.RSSBytes
		}
	}
	return f
}

var (
	resnetUse = telemetry.JobUsage{Job: "resnet50-imagenet-4f9a2c", CPUCores: ptr(14.2), RSSBytes: 61 << 30}
	bertUse   = telemetry.JobUsage{Job: "bert-5c1d00", CPUCores: ptr(1.93), RSSBytes: 5 << 30}
)

// TestTopNodesGolden renders nodes and GPUs at 80×24: a few GPUs; eight
// that fit when the jobs are few and collapse when they are many; a node
// without GPUs; stale and partial samples; more nodes than fit.
func TestTopNodesGolden(t *testing.T) {
	const resnet, bert = "resnet50-imagenet-4f9a2c", "bert-5c1d00"
	fresh := func(node string, gpus []telemetry.GPUStat, jobs ...telemetry.JobUsage) []telemetry.NodeSample {
		return []telemetry.NodeSample{
			hostAt(node, 7*time.Second, 10<<30, 3<<30), hostAt(node, 2*time.Second, 10<<30+600<<20, 3<<30+40<<20, jobs...),
			gpuAt(node, 2*time.Second, gpus),
		}
	}
	h100 := recordedGPUs(t, "h100x8+h100x8_apps", resnet, resnet, resnet, resnet, bert, bert)
	var many []telemetry.NodeSample
	for i := 0; i < 12; i++ {
		many = append(many, fresh(fmt.Sprintf("gpu-node-%02d", i), h100)...)
	}
	for _, c := range []struct {
		name          string
		f             TopFrame
		width, height int
	}{
		{"80x24-gpus", withNodes(topFixture(4), nodesOf(fresh("gpu-node-07", recordedGPUs(t, "geforce_na+geforce_na_apps", bert), bertUse)...)), 0, 0},
		{"80x24-8gpus", withNodes(topFixture(0), nodesOf(fresh("gpu-node-07", h100, resnetUse, bertUse)...)), 0, 0},
		{"80x24-8gpus-collapsed", withNodes(topFixture(10), nodesOf(fresh("gpu-node-07", h100, resnetUse, bertUse)...)), 0, 0},
		{"80x24-nogpu", withNodes(TopFrame{Now: topNow, Node: "cpu-box", Interval: time.Second, Jobs: []TopRow{
			{ID: "cnn-0a0b0c", State: "running", Active: true, Workers: 2, Batch: 64, Step: 1234, SamplesPerS: 912, StepS: 0.0702},
		}}, nodesOf(
			hostAt("cpu-box", 1*time.Second, 5<<20, 1<<20, telemetry.JobUsage{Job: "cnn-0a0b0c", CPUCores: ptr(1.98), RSSBytes: 900 << 20}),
			telemetry.NodeSample{Kind: telemetry.NodeGPU, Node: "cpu-box", Time: topNow.Add(-time.Second), Source: "none"},
		)), 0, 0},
		{"80x24-stale", withNodes(topFixture(0), nodesOf(append(fresh("gpu-node-07", recordedGPUs(t, "geforce_na+geforce_na_apps", bert), bertUse),
			hostAt("gone-node", 12*time.Minute, 1, 1), gpuAt("gone-node", 12*time.Minute, recordedGPUs(t, "h100x8+empty_apps")[:2]),
			hostAt("host-only", 3*time.Second, 1, 1),
			telemetry.NodeSample{Kind: telemetry.NodeGPU, Node: "broken-smi", Time: topNow.Add(-4 * time.Second), Source: "nvidia-smi", Error: "nvidia-smi: exit status 9"},
		)...)), 0, 0},
		{"80x24-many-nodes", withNodes(topFixture(40), nodesOf(many...)), 0, 0},
		{"132x24-gpus", withNodes(topFixture(4), nodesOf(fresh("gpu-node-07", h100, resnetUse, bertUse)...)), 132, 24},
	} {
		if c.width == 0 {
			c.width, c.height = 80, 24
		}
		t.Run(c.name, func(t *testing.T) {
			lines := RenderTop(c.f, c.width, c.height)
			checkFrame(t, lines, c.width, c.height)
			golden(t, filepath.Join("testdata", "top-"+c.name+".txt"), strings.Join(lines, "\n")+"\n")
		})
	}
}

func TestTopNodeTracker(t *testing.T) {
	tr := NewNodeTracker()
	tr.Add(hostAt("a", 10*time.Second, 1000, 500))
	tr.Add(hostAt("a", 5*time.Second, 6000, 1500))
	tr.Add(hostAt("a", 20*time.Second, 0, 0)) // replayed: older than the newest
	tr.Add(gpuAt("a", 5*time.Second, nil))
	nodes := BuildNodes(tr, topNow)
	if len(nodes) != 1 {
		t.Fatalf("%d nodes, want 1", len(nodes))
	}
	n := nodes[0]
	if n.RxBps != 1000 || n.TxBps != 200 {
		t.Errorf("rates rx %v tx %v B/s, want 5000 and 1000 bytes over 5 s", n.RxBps, n.TxBps)
	}
	if !n.GPUSeen || len(n.GPUs) != 0 || !n.at().Equal(topNow.Add(-5*time.Second)) {
		t.Errorf("node %+v: want a GPU sample without GPUs, 5 s old", n)
	}
	// A counter going back (a reboot) gives no rate.
	tr.Add(hostAt("a", time.Second, 10, 10))
	if n := BuildNodes(tr, topNow)[0]; n.RxBps >= 0 {
		t.Errorf("rate %v after the counters went back: want unknown", n.RxBps)
	}
}

func TestTopJobUsage(t *testing.T) {
	started := topNow.Add(-time.Hour)
	jobs := []api.Job{
		{ID: "dist", State: api.StateRunning, Created: started, Started: &started, Config: plugins.Config{Workers: 2, GlobalBatch: 64}},
		{ID: "done", State: api.StateSucceeded, Created: started, Started: &started, Ended: &started},
	}
	nodes := nodesOf(
		hostAt("a", time.Second, 0, 0, telemetry.JobUsage{Job: "dist", CPUCores: ptr(1.5), RSSBytes: 100}, telemetry.JobUsage{Job: "done", RSSBytes: 7}),
		hostAt("b", time.Second, 0, 0, telemetry.JobUsage{Job: "dist", CPUCores: ptr(2.0), RSSBytes: 50}),
	)
	f := BuildTopFrame(jobs, NewTopTracker(), nodes, topNow)
	d := f.Jobs[0]
	if d.ID != "dist" || d.CPUCores == nil || *d.CPUCores != 3.5 || d.RSSBytes != 150 {
		t.Errorf("dist: %+v: want 3.5 cores and 150 bytes summed over both nodes", d)
	}
	if len(f.Nodes) != 2 || f.Jobs[1].CPUCores != nil || f.Jobs[1].RSSBytes != 0 {
		t.Errorf("a finished job has usage, or nodes are missing: %+v", f)
	}
}

func TestTopNodeFormats(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{bytesShort(512), "512"}, {bytesShort(1536), "1.5K"}, {bytesShort(64431849472), "60G"}, {bytesShort(2 << 40), "2.0T"},
		{bytesShort(1023.9 * 1024), "1.0M"}, {bytesShort(-1), "-"},
		{shortGPUName("NVIDIA H100 80GB HBM3", 12), "H100 80GB"}, {shortGPUName("NVIDIA GeForce RTX 3090", 12), "RTX 3090"},
		{shortGPUName("Tesla V100-SXM2-16GB-LS", 12), "V100-SXM2-1+"}, {shortGPUName("", 12), "-"},
		{gpuJobs([]telemetry.GPUProcess{{PID: 1, Job: "a"}, {PID: 2}, {PID: 3, Job: "a"}, {PID: 4, Job: "b"}}), "a,b,+1 pid"},
		{gpuJobs(nil), "-"}, {loadText(0.5), "0.50"}, {loadText(81.37), "81.4"}, {coresText(ptr(14.2)), "14.2"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestTopNodeStale(t *testing.T) {
	for _, c := range []struct {
		name    string
		samples []telemetry.NodeSample
		want    bool
	}{
		{"fresh", []telemetry.NodeSample{hostAt("a", 5*time.Second, 0, 0)}, false},
		{"past 30 s", []telemetry.NodeSample{hostAt("a", 31*time.Second, 0, 0)}, true},
		// A node sampling every minute is not stale 50 s after its last sample.
		{"slow sampler", []telemetry.NodeSample{hostAt("a", 110*time.Second, 0, 0), hostAt("a", 50*time.Second, 0, 0)}, false},
		{"slow sampler gone", []telemetry.NodeSample{hostAt("a", 250*time.Second, 0, 0), hostAt("a", 190*time.Second, 0, 0)}, true},
	} {
		if got := nodesOf(c.samples...)[0].stale(topNow); got != c.want {
			t.Errorf("%s: stale %v, want %v", c.name, got, c.want)
		}
	}
}

// TestTopNodesFitAnyHeight lays frames with nodes out at every height from 3
// to 40 lines: each fits, keeps the jobs' header from 6 lines on, and counts
// what it leaves out.
func TestTopNodesFitAnyHeight(t *testing.T) {
	h100 := recordedGPUs(t, "h100x8+h100x8_apps", "resnet50-imagenet-4f9a2c")
	var samples []telemetry.NodeSample
	for i := 0; i < 5; i++ {
		node := fmt.Sprintf("gpu-node-%02d", i)
		samples = append(samples, hostAt(node, 2*time.Second, 0, 0), gpuAt(node, 2*time.Second, h100))
	}
	for _, jobs := range []int{0, 4, 40} {
		for nodes := 1; nodes <= 5; nodes += 4 {
			f := withNodes(topFixture(jobs), nodesOf(samples[:2*nodes]...))
			for h := 3; h <= 40; h++ {
				lines := RenderTop(f, 80, h)
				checkFrame(t, lines, 80, h)
				text := strings.Join(lines, "\n")
				if h >= 6 && !strings.Contains(text, "\nJOB ") {
					t.Errorf("%d jobs, %d nodes, height %d: no jobs' header:\n%s", jobs, nodes, h, text)
				}
				shownNodes := 0
				for _, l := range lines {
					if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "gpu-node-") && !strings.Contains(f[0], ":") {
						shownNodes++
					}
				}
				if shownNodes == 0 && !strings.Contains(lines[0], fmt.Sprintf(", %d node(s)", nodes)) {
					t.Errorf("%d jobs, %d nodes, height %d: no node line and no count in the title:\n%s", jobs, nodes, h, text)
				}
				if shownNodes > 0 && shownNodes < nodes && !strings.Contains(text, "more node(s)") {
					t.Errorf("%d jobs, %d nodes, height %d: %d node lines and no count of the rest:\n%s", jobs, nodes, h, shownNodes, text)
				}
				shownJobs := 0
				for _, r := range f.Jobs {
					if strings.Contains(text, "\n"+clip(r.ID, 15)) {
						shownJobs++
					}
				}
				if h >= 6 && shownJobs < len(f.Jobs) && !strings.Contains(text, "more job(s)") {
					t.Errorf("%d jobs, %d nodes, height %d: %d job rows and no count of the rest:\n%s", jobs, nodes, h, shownJobs, text)
				}
			}
		}
	}
}
