package slurm

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/internal/syncbuf"
	"github.com/scavenger-ml/scavenger/plugins"
)

// oddArgs are arguments a shell would mangle if it parsed them.
var oddArgs = []string{"it's", `"quoted"`, "$HOME", "`id`", "a b", "", "*", `back\slash`, "new\nline", "$(echo x)", ";exit 9"}

// TestTaskScriptRunsArgvVerbatim runs the task script with sh and a fake
// Slurm task environment: the command gets its arguments unchanged and the
// contract variables from Slurm's.
func TestTaskScriptRunsArgvVerbatim(t *testing.T) {
	args := append([]string{"-c", taskScript(plugins.ModeRanks), "scav-task",
		"/bin/sh", "-c", `echo "$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR"; printf '<%s>\n' "$@"`, "sh"}, oddArgs...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SLURM_PROCID=5", "SLURM_LOCALID=1", "SLURM_NTASKS=6",
		"SLURM_GTIDS=4,5,6", "SLURM_STEP_NUM_NODES=1", "RANK=stale"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("task script: %v", err)
	}
	got := strings.SplitN(string(out), "\n", 3)
	if !strings.HasPrefix(got[0], pidMarker) || got[1] != "5 1 6 3 127.0.0.1" {
		t.Fatalf("first lines %q", got[:2])
	}
	var want strings.Builder
	for _, a := range oddArgs {
		want.WriteString("<" + a + ">\n")
	}
	if got[2] != want.String() {
		t.Errorf("arguments:\n%s\nwant\n%s", got[2], want.String())
	}

	// Without SLURM_GTIDS (newer Slurm), LOCAL_WORLD_SIZE comes from this
	// node's entry of SLURM_STEP_TASKS_PER_NODE.
	for node, want := range map[string]string{"0": "2", "1": "2", "2": "1", "3": "4"} {
		cmd := exec.Command("/bin/sh", "-c", taskScript(plugins.ModeRanks), "scav-task", "/bin/sh", "-c", `echo "$LOCAL_WORLD_SIZE"`)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "SLURM_PROCID=0", "SLURM_NTASKS=9", "SLURM_NODEID=" + node,
			"SLURM_STEP_TASKS_PER_NODE=2(x2),1,4", "SLURM_STEP_NUM_NODES=4", "SLURM_STEP_NODELIST=n[1-4]"}
		out, err := cmd.Output()
		if _, got, _ := strings.Cut(string(out), "\n"); err != nil || strings.TrimSpace(got) != want {
			t.Errorf("node %s: LOCAL_WORLD_SIZE %q, %v; want %s", node, got, err, want)
		}
	}

	// ModeSelf: no rank variables, even stale ones from the environment.
	cmd = exec.Command("/bin/sh", "-c", taskScript(plugins.ModeSelf), "scav-task", "/bin/sh", "-c", `echo "[$RANK][$WORLD_SIZE][$MASTER_ADDR]"`)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SLURM_PROCID=0", "RANK=3", "WORLD_SIZE=9"}
	out, err = cmd.Output()
	if err != nil || !strings.HasSuffix(string(out), "[][][127.0.0.1]\n") {
		t.Errorf("self mode: %q, %v", out, err)
	}
}

// TestBatchScriptQuotesArgs renders a batch script around a fake srun that
// prints its arguments, runs it, and checks that every argument arrived
// unchanged and that srun's exit status is reported and returned.
func TestBatchScriptQuotesArgs(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake srun's")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nprintf '<%s>\\n' \"$@\"\nexit 4\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := plugins.AttemptSpec{JobID: "j'1 $x", Attempt: 2, Command: oddArgs, Config: plugins.Config{Workers: 2}}
	srun := srunArgs("", 2, 0, jobName(spec), "/work dir", []string{"--exact"}, plugins.ModeRanks, oddArgs)
	script := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(script, []byte(batchScript(fake, srun, spec.JobID, spec.Attempt)), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SLURM_RESTART_COUNT=2"}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 {
		t.Fatalf("batch script: %v, want exit 4 (srun's)", err)
	}
	var want strings.Builder
	want.WriteString(runMarker + "2\n")
	for _, a := range srun {
		want.WriteString("<" + a + ">\n")
	}
	if stdout.String() != want.String() {
		t.Errorf("stdout:\n%s\nwant\n%s", stdout.String(), want.String())
	}
	if stderr.String() != runMarker+"2\n"+endMarker+"4\n" {
		t.Errorf("stderr %q", stderr.String())
	}
	if !strings.Contains(srun[len(srun)-len(oddArgs)-2], "exec \"$@\"") {
		t.Errorf("srun args do not end with the task script and the command: %q", srun)
	}
}

// TestBatchScriptForwardsUSR1 runs a batch script whose fake srun waits,
// sends the script SIGUSR1, and checks that the trap ran scancel for the
// job's steps and that the script went on waiting for srun.
func TestBatchScriptForwardsUSR1(t *testing.T) {
	dir := t.TempDir()
	fakeSrun := filepath.Join(dir, "srun")
	if err := os.WriteFile(fakeSrun, []byte("#!/bin/sh\necho started >&2\nsleep 1\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scancel"), []byte("#!/bin/sh\necho \"scancel $*\" >&2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(script, []byte(batchScript(fakeSrun, nil, "j", 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script)
	cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin", "SLURM_JOB_ID=77"}
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(stderr.String(), "started") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Signal(os.Signal(sigUSR1))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("batch script: %v\n%s", err, stderr.String())
	}
	if got := stderr.String(); !strings.Contains(got, "scancel --signal=USR1 77\n") || !strings.HasSuffix(got, endMarker+"0\n") {
		t.Errorf("stderr %q: want the forwarded USR1 and srun's status 0", got)
	}
}

func TestSbatchArgs(t *testing.T) {
	spec := plugins.AttemptSpec{JobID: "job 1/x", Attempt: 3, Dir: "/w", Config: plugins.Config{Workers: 4, Nodes: 2}}
	got := sbatchArgs(spec, 4, "/d", "gpu", 1500*time.Millisecond, []string{"--time=1:00"})
	want := []string{"--parsable", "--job-name=scav-job_1_x-a3", "--ntasks=4", "--nodes=2", "--partition=gpu",
		"--signal=B:USR1@2", "--requeue", "--open-mode=append", "--output=/d/out", "--error=/d/err", "--export=ALL",
		"--chdir=/w", "--time=1:00"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

var sigUSR1 = syscall.SIGUSR1
