package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// TestOneNotationAndPlurals: sim prints a configuration one way (the
// notation --help explains), never the optimizer's TYPE:NODES:WORKERS:BATCH
// or "node(s)"; its counts and run's status line have their plurals right.
func TestOneNotationAndPlurals(t *testing.T) {
	out, errOut, code := scavctl(t, t.TempDir(), "sim", "--trace", "traces/cifar10", "--objective", "cost", "--policy", "adaptive")
	if code != 0 {
		t.Fatalf("sim: exit %d\n%s", code, errOut)
	}
	if m := regexp.MustCompile(`[A-Za-z][\w.-]*:\d+:\d+(:\d+)?|\(s\)|\(es\)`).FindString(out); m != "" {
		t.Errorf("sim prints %q: want the notation (\"aws 4x512\") and plurals in words:\n%s", m, out)
	}
	if !regexp.MustCompile(`Oracle:\s+\S+ \d+x\d+`).MatchString(out) {
		t.Errorf("sim's oracle is not in the notation:\n%s", out)
	}
	help, _, _ := scavctl(t, t.TempDir(), "--help")
	if !strings.Contains(help, `K workers x global batch B, "2x128"`) {
		t.Errorf("scavctl --help does not explain the notation:\n%s", help)
	}
	st := newStepStatus(plugins.Config{Workers: 1, GlobalBatch: 32}, false)
	st.observe(telemetry.StepRecord{Step: 1, World: 1, Rank: 0, Seconds: 0.1, GlobalBatch: 32})
	if line := st.line(); !strings.Contains(line, "· 1 worker ·") {
		t.Errorf("status line %q: want \"1 worker\"", line)
	}
	if s := st.summary(); !strings.HasPrefix(s, "1 step, 1 step record, ") {
		t.Errorf("summary %q: want \"1 step, 1 step record, ...\"", s)
	}
}
