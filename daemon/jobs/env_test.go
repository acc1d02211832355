package jobs

import (
	"fmt"
	"testing"

	"github.com/scavenger-ml/scavenger/api"
)

func TestDefaultName(t *testing.T) {
	for _, c := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"/usr/bin/python3", "examples/cnn.py", "--steps", "5"}, "cnn"},
		{[]string{"python", "-u", "train.py"}, "train"},
		{[]string{"torchrun", "--nproc_per_node={workers}", "my-train.py"}, "my-train"},
		{[]string{"/bin/sh", "-c", "echo hi"}, "sh"},
		{[]string{"./run.sh"}, "run"},
		{[]string{"???"}, "job"},
	} {
		if got := defaultName(c.cmd); got != c.want {
			t.Errorf("defaultName(%q) = %q, want %q", c.cmd, got, c.want)
		}
	}
}

func TestWithPythonPath(t *testing.T) {
	got := withPythonPath([]string{"A=1", "PYTHONPATH=/x:/y"}, "/client")
	if fmt.Sprint(got) != "[A=1 PYTHONPATH=/client:/x:/y]" {
		t.Fatalf("got %v", got)
	}
	got = withPythonPath([]string{"A=1"}, "/client")
	if fmt.Sprint(got) != "[A=1 PYTHONPATH=/client]" {
		t.Fatalf("got %v", got)
	}
}

// TestWorkerEnvTellsTheWorkAndItsBase: the script learns the target and the
// batch it is counted at, and nothing of either without a target.
func TestWorkerEnvTellsTheWorkAndItsBase(t *testing.T) {
	got := fmt.Sprint(workerEnv([]string{"A=1"}, "", api.Optimize{TargetSamples: 4096, BaseBatch: 32}))
	if got != "[A=1 PYTHONUNBUFFERED=1 SCAV_TARGET_SAMPLES=4096 SCAV_BASE_BATCH=32]" {
		t.Errorf("with a target: %s", got)
	}
	if got := fmt.Sprint(workerEnv([]string{"A=1"}, "", api.Optimize{BaseBatch: 32})); got != "[A=1 PYTHONUNBUFFERED=1]" {
		t.Errorf("without a target: %s", got)
	}
}
