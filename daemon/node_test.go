package daemon

import (
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// stepWriter is a worker that reports a step every 50 ms on the daemon's
// socket, with an idle child process (sleep) that belongs to its job too.
const stepWriter = `
import json, os, socket, subprocess, time
child = subprocess.Popen(["sleep", "60"])
s = socket.socket(socket.AF_UNIX); s.connect(os.environ["SCAV_SOCKET"])
env = lambda k: os.environ[k]
s.sendall((json.dumps({"v": 1, "kind": "hello", "job": env("SCAV_JOB_ID"), "attempt": int(env("SCAV_ATTEMPT")), "rank": int(env("RANK")),
    "world": int(env("WORLD_SIZE")), "step": 0, "t": time.time(), "token": env("SCAV_TOKEN")}) + "\n").encode())
step = 0
try:
    while True:
        step += 1
        s.sendall((json.dumps({"v": 1, "job": env("SCAV_JOB_ID"), "attempt": int(env("SCAV_ATTEMPT")), "rank": int(env("RANK")),
            "world": int(env("WORLD_SIZE")), "step": step, "t": time.time(), "dt": 0.05, "samples": 8, "loss": 10.0 / step,
            "local_sqr": 2.0 + 0.1 * (step % 3), "avg_sqr": 1.5 + 0.05 * (step % 2)}) + "\n").encode())
        time.sleep(0.05)
finally:
    child.kill()
`

// startNodeDaemon runs a daemon that samples its node every 200 ms and
// serves /metrics on a free port.
func startNodeDaemon(t *testing.T) (*Daemon, *api.Client) {
	t.Helper()
	return startDaemonWith(t, "scavd-node-", Config{Listen: "127.0.0.1:0", Node: "node-test.example", NodeSampleEvery: 200 * time.Millisecond,
		GPUSource: "none", MetricsListen: "127.0.0.1:0"})
}

// scrape reads /metrics and returns the sample lines by metric name.
func scrape(t *testing.T, addr string) map[string][]string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		out[name] = append(out[name], line)
	}
	return out
}

// value is the value of the first line of metric whose labels include all of want.
func value(lines []string, want ...string) (float64, bool) {
next:
	for _, l := range lines {
		for _, w := range want {
			if !strings.Contains(l, w) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		return v, err == nil
	}
	return 0, false
}

func TestNodeSamplesAndMetricsOfARunningJob(t *testing.T) {
	d, c := startNodeDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j, err := c.Run(ctx, api.RunRequest{Name: "nodejob", Command: []string{python3(), "-c", stepWriter}, Dir: t.TempDir(), Env: os.Environ(),
		Config: plugins.Config{Workers: 2, GlobalBatch: 16}, Grace: api.Duration(time.Second),
		// A policy with one configuration to choose: it observes (and
		// estimates the gradient noise scale) but never moves the job.
		Optimize: api.Optimize{Policy: "adaptive", TargetSamples: 1 << 20, MinWorkers: 2, MaxWorkers: 2, MinBatch: 16, MaxBatch: 16}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background(), j.ID, time.Second)

	// The host samples on NATS attribute both workers and their children to the job.
	node := telemetry.SubjectNode("node-test.example")
	var usage *telemetry.JobUsage
	eventually(t, "a host sample with the job's 4 processes", 20*time.Second, func() bool {
		usage = nil
		err := c.NodeSamples(ctx, "node-test.example", telemetry.NodeHost, false, func(s telemetry.NodeSample) error {
			if s.Node != node || s.Kind != telemetry.NodeHost {
				t.Errorf("sample of %s/%s on node %s's host subject", s.Node, s.Kind, node)
			}
			for i, u := range s.Host.Jobs {
				if u.Job == j.ID {
					usage = &s.Host.Jobs[i]
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return usage != nil && len(usage.Processes) == 4 && names(usage)["sleep"] == 2
	})
	if n := names(usage); n["python3"] != 2 || usage.RSSBytes == 0 {
		t.Errorf("job processes %+v (rss %d), want 2 workers and 2 sleeps", usage.Processes, usage.RSSBytes)
	}
	var gpuSamples int
	if err := c.NodeSamples(ctx, "", telemetry.NodeGPU, false, func(s telemetry.NodeSample) error {
		gpuSamples++
		if s.Source != "none" || len(s.GPUs) != 0 {
			t.Errorf("gpu sample on a node without GPUs: %+v", s)
		}
		return nil
	}); err != nil || gpuSamples == 0 {
		t.Errorf("gpu samples: %d, %v", gpuSamples, err)
	}

	// /metrics shows the job's progress and configuration under its labels.
	labels := []string{`job_id="` + j.ID + `"`, `name="nodejob"`, `node="node-test.example"`}
	var m map[string][]string
	eventually(t, "a step rate in /metrics", 20*time.Second, func() bool {
		m = scrape(t, d.MetricsAddr())
		v, ok := value(m["scavenger_job_steps_per_second"], labels...)
		return ok && v > 0
	})
	for _, c := range []struct {
		name string
		min  float64
	}{
		{"scavenger_job_last_step", 1}, {"scavenger_job_samples_per_second", 1}, {"scavenger_job_workers", 2},
		{"scavenger_job_global_batch_size", 16}, {"scavenger_job_step_duration_seconds", 0.01}, {"scavenger_job_info", 1},
		{"scavenger_job_processes", 4}, {"scavenger_job_resident_memory_bytes", 1}, {"scavenger_job_loss", 1e-9},
	} {
		if v, ok := value(m[c.name], labels...); !ok || v < c.min {
			t.Errorf("%s{%s} = %v (present %v), want at least %v", c.name, strings.Join(labels, ","), v, ok, c.min)
		}
	}
	eventually(t, "a gradient noise scale in /metrics", 20*time.Second, func() bool {
		m = scrape(t, d.MetricsAddr())
		v, ok := value(m["scavenger_job_gradient_noise_scale"], labels...)
		return ok && v > 0
	})
	if _, ok := value(m["scavenger_job_info"], append(labels, `policy="adaptive"`, `launcher="local"`, `state="running"`)...); !ok {
		t.Errorf("no scavenger_job_info with the policy and launcher: %v", m["scavenger_job_info"])
	}
	t.Logf("predictions: %v %v", m["scavenger_job_predicted_remaining_seconds"], m["scavenger_job_predicted_cost_dollars"])
	if v, ok := value(m["scavenger_ingest_records_total"], `node="node-test.example"`); !ok || v < 1 {
		t.Errorf("ingest records %v", v)
	}
	if _, ok := value(m["scavenger_ingest_dropped_records_total"], `reason="malformed"`); !ok {
		t.Error("no dropped-records counter for reason malformed")
	}
	if v, ok := value(m["scavenger_node_gpus"], `source="none"`); !ok || v != 0 {
		t.Errorf("scavenger_node_gpus = %v, %v", v, ok)
	}
	if _, ok := value(m["scavenger_node_memory_total_bytes"]); !ok {
		t.Error("no node memory")
	}
	problems, err := testutil.GatherAndLint(d.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}

func names(u *telemetry.JobUsage) map[string]int {
	n := map[string]int{}
	for _, p := range u.Processes {
		n[p.Name]++
	}
	return n
}

// python3 is the system interpreter (not a shim that runs it as a grandchild).
func python3() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

func TestNodeSamplingAndMetricsCanBeOff(t *testing.T) {
	dir := t.TempDir()
	d, err := Start(context.Background(), Config{StateDir: dir, Listen: "127.0.0.1:0", NodeSampleEvery: -1}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.node != nil || d.MetricsAddr() != "" {
		t.Errorf("sampler %v, metrics %q; want neither", d.node, d.MetricsAddr())
	}
	if g, h := d.node.latest(); g != nil || h != nil {
		t.Error("samples without a sampler")
	}
}
