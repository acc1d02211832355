package main

// End-to-end checks of issue 13's defects through the scavctl binary: a job
// that cannot start, reserved environment variables, capacity.

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scavctlWithin is scavctl that fails the test when the command does not
// end within limit (it used to hang).
func scavctlWithin(t *testing.T, limit time.Duration, state string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, scavctlBin, append([]string{"--state-dir", state}, args...)...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	_ = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("scavctl %v did not end within %s:\n%s", args, limit, e.String())
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

func TestRunEndsWhenTheJobCannotStart(t *testing.T) {
	_, errOut, code := scavctlWithin(t, time.Minute, stateDir(t), nil, "run", "--", "/nonexistent/cmd")
	if code != 127 || !strings.Contains(errOut, "start:") || !strings.Contains(errOut, "/nonexistent/cmd") {
		t.Fatalf("exit %d, want 127 with the start error:\n%s", code, errOut)
	}
}

func TestRunRefusesReservedEnv(t *testing.T) {
	state := stateDir(t)
	for _, kv := range []string{"SCAV_JOB_ID=x", "RANK=5"} {
		k, _, _ := strings.Cut(kv, "=")
		_, errOut, code := scavctlWithin(t, time.Minute, state, nil, "run", "--env", kv, "--", "/bin/true")
		if code == 0 || !strings.Contains(errOut, "--env "+k) {
			t.Errorf("run --env %s: exit %d, want a refusal naming --env %s:\n%s", kv, code, k, errOut)
		}
	}
	// Inherited from scavctl's own environment they are dropped, not refused:
	// the workers get Scavenger's values.
	out, errOut, code := scavctlWithin(t, time.Minute, state, []string{"RANK=5", "SCAV_JOB_ID=x"}, "run", "--", "/bin/sh", "-c", `echo "rank=$RANK"`)
	if code != 0 || !strings.Contains(out, "rank=0") {
		t.Errorf("run with RANK=5 in scavctl's environment: exit %d, output %q, want rank=0:\n%s", code, out, errOut)
	}
}

func TestRunRefusesMoreWorkersThanSlots(t *testing.T) {
	state := stateDir(t)
	n := strconv.Itoa(runtime.NumCPU())
	_, errOut, code := scavctlWithin(t, time.Minute, state, nil, "run", "--workers", "100000000", "--", "/bin/true")
	if code == 0 || !strings.Contains(errOut, "starts at most "+n+" workers") {
		t.Errorf("run --workers 100000000: exit %d, want a refusal naming the limit of %s:\n%s", code, n, errOut)
	}
	_, errOut, code = scavctlWithin(t, time.Minute, state, []string{"SCAV_LOCAL_SLOTS=1"}, "run", "--workers", "2", "--", "/bin/true")
	if code == 0 || !strings.Contains(errOut, "starts at most 1 worker (") /* plurals right: issue 23 */ {
		t.Errorf("run --workers 2 with 1 slot: exit %d, want a refusal:\n%s", code, errOut)
	}
}

func TestStatusOfTheDaemon(t *testing.T) {
	out, errOut, code := scavctlWithin(t, time.Minute, stateDir(t), nil, "status")
	if code != 0 || !strings.Contains(out, "State disk:") || !strings.Contains(out, "ok") {
		t.Errorf("scavctl status: exit %d\n%s%s", code, out, errOut)
	}
}
