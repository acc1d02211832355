package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/syncbuf"

	"github.com/scavenger-ml/scavenger/telemetry"
)

var (
	scavdOnce sync.Once
	scavdBin  string
	scavdErr  error
)

// scavdBinary builds scavd once, next to scavctl.
func scavdBinary(t *testing.T) string {
	t.Helper()
	scavdOnce.Do(func() {
		scavdBin = filepath.Join(filepath.Dir(scavctlBin), "scavd")
		if out, err := exec.Command("go", "build", "-o", scavdBin, "../scavd").CombinedOutput(); err != nil {
			scavdErr = fmt.Errorf("build scavd: %w\n%s", err, out)
		}
	})
	if scavdErr != nil {
		t.Fatal(scavdErr)
	}
	return scavdBin
}

// startDaemon starts d (a scavd) with its output in the returned buffer;
// the test's cleanup stops it with SIGTERM unless it was waited for, and
// prints its output, under name, if the test failed.
func startDaemon(t *testing.T, d *exec.Cmd, name string) *syncbuf.Buffer {
	t.Helper()
	var out syncbuf.Buffer
	d.Stdout, d.Stderr = &out, &out
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d.ProcessState == nil {
			_ = d.Process.Signal(syscall.SIGTERM)
			_ = d.Wait()
		}
		if t.Failed() {
			t.Logf("%s:\n%s", name, out.String())
		}
	})
	return &out
}

// startScavd builds scavd and runs it on state with node sampling every
// 300 ms and /metrics on a free port; it returns the daemon's discovery info
// once it is ready. The test's cleanup stops it with SIGTERM.
func startScavd(t *testing.T, state string, extra ...string) api.Info {
	t.Helper()
	args := append([]string{"--state-dir", state, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--node-sample-every", "300ms", "--gpu-source", "none", "--node", "e2e-node", "--log-level", "warn"}, extra...)
	cmd := exec.Command(scavdBinary(t), args...)
	cmd.Dir = repoRoot
	logf, err := os.Create(filepath.Join(t.TempDir(), "scavd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Error("scavd did not stop within 30s of SIGTERM")
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("scavd log:\n%s", b)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if info, err := api.ReadDiscovery(state); err == nil && info.PID == cmd.Process.Pid && info.Metrics != "" {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatal("scavd wrote no discovery file with a metrics address within 30s")
		}
	}
}

// metricValue scrapes /metrics at addr for the first sample of name whose
// labels include every one of labels.
func metricValue(t *testing.T, addr, name string, labels ...string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
next:
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		return v, err == nil
	}
	return 0, false
}

// A real PyTorch DDP job under a real scavd: /metrics shows its step rate
// under its labels, and the node samples reach NATS and `scavctl node`.
func TestNodeTelemetryOfAPyTorchJob(t *testing.T) {
	needTorch(t)
	state := stateDir(t)
	info := startScavd(t, state, "--metrics-per-job", "on") // a root scavd names no job in /metrics unless told
	cmd, _, errOut := startJob(t, state, "--name", "nodecnn", "--workers", "2", "--batch-size", "64", "--",
		pythonBin, "examples/cnn.py", "--steps", "100000")
	id := waitForRecords(t, state, errOut, 10)
	labels := []string{`job_id="` + id + `"`, `name="nodecnn"`, `node="e2e-node"`}

	var rate float64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if v, ok := metricValue(t, info.Metrics, "scavenger_job_steps_per_second", labels...); ok && v > 0 {
			rate = v
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no step rate for %s in /metrics within 30s", id)
		}
	}
	for _, m := range []struct {
		name string
		want float64
	}{{"scavenger_job_workers", 2}, {"scavenger_job_global_batch_size", 64}} {
		if v, ok := metricValue(t, info.Metrics, m.name, labels...); !ok || v != m.want {
			t.Errorf("%s = %v (present %v), want %v", m.name, v, ok, m.want)
		}
	}
	if v, ok := metricValue(t, info.Metrics, "scavenger_job_samples_per_second", labels...); !ok || v < 64*rate*0.5 {
		t.Errorf("samples per second %v at %v steps per second, batch 64", v, rate)
	}

	// The job's two workers show in the host samples, through `scavctl node`.
	var procs int
	for deadline := time.Now().Add(30 * time.Second); procs < 2; time.Sleep(300 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no host sample with the job's workers within 30s (saw %d processes)", procs)
		}
		for _, s := range jsonLines[telemetry.NodeSample](t, state, "node", "e2e-node", "--kind", "host", "--since", "10s", "-o", "json") {
			if s.Kind != telemetry.NodeHost || s.Node != "e2e-node" {
				t.Fatalf("sample %s/%s from `scavctl node e2e-node --kind host`", s.Node, s.Kind)
			}
			for _, u := range s.Host.Jobs {
				if u.Job == id {
					procs = max(procs, len(u.Processes))
				}
			}
		}
	}
	if v, ok := metricValue(t, info.Metrics, "scavenger_job_cpu_seconds", labels...); !ok || v <= 0 {
		t.Errorf("job CPU seconds %v (present %v)", v, ok)
	}
	out, _, code := scavctl(t, state, "node")
	if code != 0 || !strings.Contains(out, "no GPUs (none)") || !strings.Contains(out, "job "+id) {
		t.Errorf("scavctl node: exit %d\n%s", code, out)
	}

	if _, e, code := scavctl(t, state, "stop", id, "--grace", "2s"); code != 0 {
		t.Fatalf("scavctl stop: exit %d\n%s", code, e)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not end within 30s of scavctl stop")
	}
}

func TestNodeHelpAndBadFlags(t *testing.T) {
	out, errOut, code := scavctl(t, t.TempDir(), "node", "--help")
	if code != 0 || !strings.Contains(out, "Usage:") || !strings.Contains(out, "scav.node.<node>.gpu") {
		t.Errorf("scavctl node --help: exit %d\n%s%s", code, out, errOut)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"node", "--kind", "disk"}, `--kind "disk"`},
		{[]string{"node", "-o", "yaml"}, `-o "yaml"`},
		{[]string{"node", "a", "b"}, "accepts at most 1 arg"},
	} {
		if _, errOut, code := scavctl(t, t.TempDir(), c.args...); code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("scavctl %v: exit %d, stderr %q; want an error containing %q", c.args, code, errOut, c.want)
		}
	}
}
