package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadFlagsAreRefused (issue 21's last row): each is refused before
// anything starts, saying what is wrong with it and what to give instead.
// The state directory holds no daemon: a refusal must not need one.
func TestBadFlagsAreRefused(t *testing.T) {
	state := t.TempDir()
	job := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(job, []byte("workers: 1\ngrace: 5s\nworkers: 2\ncommand: [true]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--target-steps", "-1", "--", "true"}, "--target-steps: must not be negative"},
		{[]string{"run", "--price", "-1", "--", "true"}, "--price: must not be negative"},
		{[]string{"run", "--deadline", "-1h", "--", "true"}, "--deadline: must not be negative"},
		{[]string{"run", "--grace", "1000000h", "--", "true"}, "--grace 1000000h0m0s: use 0 to 1h0m0s"},
		{[]string{"run", "--restart-window", "-1s", "--", "true"}, "--restart-window -1s: use 0"},
		{[]string{"run", "--on-stall", "panic", "--", "true"}, `--on-stall "panic": use report or restart`},
		{[]string{"run", "--on-nan", "ignore", "--", "true"}, `--on-nan "ignore": use warn or stop`},
		{[]string{"run", "--policy", "bogus", "--workers", "1:2", "--", "true"}, `--policy "bogus": no such policy; use one of fixed`},
		{[]string{"run", "-f", job}, "job.yaml:3: workers given twice (first at line 1)"},
		{[]string{"stop", "--grace", "-5s", "somejob"}, "--grace -5s: use 0 (the job's own) to 1h0m0s"},
		{[]string{"jobs", "--state", "bogus"}, `--state "bogus": use starting, running, stopping, succeeded, failed, stopped, active`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			a := &app{stdout: &out, stderr: &errOut}
			root := newRootCmd(a)
			root.SetArgs(append([]string{"--state-dir", state}, c.args...))
			root.SetOut(&out)
			root.SetErr(&errOut)
			err := root.ExecuteContext(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
			if strings.Contains(err.Error(), "needs a target") {
				t.Errorf("a bad policy's error speaks of its target first: %v", err)
			}
		})
	}
	if ents, _ := os.ReadDir(state); len(ents) > 0 {
		t.Errorf("a refused command started something: %s holds %d entries", state, len(ents))
	}
}
