package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/daemon"
	"github.com/scavenger-ml/scavenger/internal/testdir"
	"github.com/scavenger-ml/scavenger/internal/testproc"
)

// slurmEnv is the environment Slurm gives a prolog/epilog hook.
func slurmEnv(id string) []string {
	return []string{"SLURM_JOB_ID=" + id, "SLURM_JOB_USER=alice", "SLURM_JOB_UID=1001",
		"SLURM_JOB_PARTITION=debug", "SLURM_JOB_NODELIST=node[1-2]"}
}

func TestSlurmHookWithoutDaemonFailsOpen(t *testing.T) {
	state := stateDir(t)
	logFile := filepath.Join(state, "hooks.log")
	for _, hook := range []string{"prolog", "epilog"} {
		_, errOut, code := scavctlEnv(t, state, append(slurmEnv("77"), "SCAV_API="), "--api", "/nonexistent/api.sock", "slurm", hook, "--log", logFile)
		if code != 0 || !strings.Contains(errOut, "ignored (a failing hook would drain the node)") {
			t.Fatalf("%s without a daemon: exit %d, stderr %q; want 0 and the reason", hook, code, errOut)
		}
	}
	_, errOut, code := scavctlEnv(t, state, []string{"SLURM_JOB_ID="}, "slurm", "prolog")
	if code != 0 || !strings.Contains(errOut, "SLURM_JOB_ID is not set") {
		t.Fatalf("prolog outside Slurm: exit %d, stderr %q", code, errOut)
	}
	b, err := os.ReadFile(logFile)
	if n := strings.Count(string(b), "slurm.77") + strings.Count(string(b), "job 77:"); err != nil || n < 2 {
		t.Fatalf("hook log %q (%v): want a line per run", b, err)
	}
}

func TestSlurmHooksTieJobsToTheAllocation(t *testing.T) {
	state := stateDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := daemon.Start(ctx, daemon.Config{StateDir: state, Listen: "127.0.0.1:0"}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	env := slurmEnv("4711")

	if _, e, code := scavctlEnv(t, state, env, "slurm", "prolog"); code != 0 || e != "" {
		t.Fatalf("prolog: exit %d, stderr %q", code, e)
	}
	// A job run inside the allocation is tied to it...
	if _, e, code := scavctlEnv(t, state, env, "run", "--", "/bin/sh", "-c", "exit 0"); code != 0 {
		t.Fatalf("run in the allocation: exit %d\n%s", code, e)
	}
	// ... and one still running when the allocation ends is stopped by the epilog.
	long := exec.Command(scavctlBin, "--state-dir", state, "run", "--grace", "2s", "--", "/bin/sh", "-c", "echo started; exec sleep 60")
	long.Env = append(os.Environ(), env...)
	var longErr strings.Builder
	long.Stderr = &longErr
	testproc.Start(t, long)
	var alloc api.Allocation
	for deadline := time.Now().Add(30 * time.Second); len(alloc.Jobs) < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the allocation never listed both jobs: %+v\n%s", alloc, longErr.String())
		}
		alloc = allocation(t, state, "slurm.4711")
	}
	if alloc.User != "alice" || alloc.UID != 1001 || alloc.Partition != "debug" || alloc.Nodes != "node[1-2]" || alloc.Started == nil || alloc.Ended != nil {
		t.Fatalf("allocation after the prolog: %+v", alloc)
	}
	if _, e, code := scavctlEnv(t, state, env, "slurm", "epilog"); code != 0 || e != "" {
		t.Fatalf("epilog: exit %d, stderr %q", code, e)
	}
	done := make(chan error, 1)
	go func() { done <- long.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the job in the ended allocation still runs:\n%s", longErr.String())
	}
	if alloc = allocation(t, state, "slurm.4711"); alloc.Ended == nil {
		t.Fatalf("allocation after the epilog: %+v", alloc)
	}
	for _, id := range alloc.Jobs {
		var j struct {
			Job api.Job `json:"job"`
		}
		out, _, _ := scavctl(t, state, "status", id, "-o", "json")
		if err := json.Unmarshal([]byte(out), &j); err != nil || j.Job.Allocation != "slurm.4711" || !j.Job.State.Done() {
			t.Errorf("job %s: %s (%v); want it tied to slurm.4711 and ended", id, out, err)
		}
	}
}

// allocation reads one allocation record through `scavctl slurm allocations`.
func allocation(t *testing.T, state, key string) api.Allocation {
	t.Helper()
	out, e, code := scavctl(t, state, "slurm", "allocations", "-o", "json")
	var as []api.Allocation
	if err := json.Unmarshal([]byte(out), &as); code != 0 || err != nil {
		t.Fatalf("slurm allocations: exit %d, %v\n%s%s", code, err, out, e)
	}
	for _, a := range as {
		if a.Key() == key {
			return a
		}
	}
	return api.Allocation{}
}

// BenchmarkSlurmPrologHook measures a prolog hook from exec to exit against a
// running daemon: Slurm waits for it before every job starts (target < 100 ms).
func BenchmarkSlurmPrologHook(b *testing.B) {
	state := testdir.Short(b, "scav-")
	d, err := daemon.Start(context.Background(), daemon.Config{StateDir: state, Listen: "127.0.0.1:0"}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	env := append(os.Environ(), slurmEnv("1")...)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(scavctlBin, "--state-dir", state, "slurm", "prolog")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			b.Fatalf("prolog: %v %s", err, out)
		}
	}
}
