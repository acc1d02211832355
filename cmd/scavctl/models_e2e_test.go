package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/report"
)

// TestSecondRunStartsFromTheStore: a second run of the same command under
// the same policy starts from what the first stored (scavctl models shows
// it) and probes at most once, where the first searched; `models forget`
// removes it, and only its owner's.
func TestSecondRunStartsFromTheStore(t *testing.T) {
	needTorch(t)
	const target = 400 // steps at the starting batch
	state := stateDir(t)
	run := func() report.JobReport {
		t.Helper()
		out, errOut, code := scavctl(t, state, "run", "--workers", "1:2", "--batch-size", "32:128", "--policy", "scavenger",
			"--target-steps", strconv.Itoa(target), "--", pythonBin, "examples/resumable_cnn.py")
		if code != 0 {
			t.Fatalf("scavctl run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		var rep report.JobReport
		rout, _, _ := scavctl(t, state, "report", jobID(t, errOut), "-o", "json")
		if err := json.Unmarshal([]byte(rout), &rep); err != nil {
			t.Fatalf("report: %v\n%s", err, rout)
		}
		return rep
	}
	probes := func(rep report.JobReport) int {
		n := 0
		for _, a := range rep.Timeline {
			if a.StartedBy == "probing" {
				n++
			}
		}
		return n
	}
	// Every attempt a decision started shows what it predicted there
	// beside what it measured.
	predicted := func(which string, rep report.JobReport) {
		t.Helper()
		for _, a := range rep.Timeline {
			if a.StartedBy != "" && (a.PredictedStepS <= 0 || a.PredictedLater || a.MeasuredStepS <= 0) {
				t.Errorf("%s run, attempt %d started by a %s decision: predicted %v ms (later: %v), measured %v ms", which, a.Attempt.Attempt, a.StartedBy,
					1e3*a.PredictedStepS, a.PredictedLater, 1e3*a.MeasuredStepS)
			}
		}
	}
	first := run()
	predicted("first", first)
	var entries []api.ModelEntry
	out, errOut, code := scavctl(t, state, "models", "list", "-o", "json")
	if err := json.Unmarshal([]byte(out), &entries); code != 0 || err != nil || len(entries) != 1 {
		t.Fatalf("models list: exit %d, %v: %d entries, want the first run's (one machine type)\n%s%s", code, err, len(entries), out, errOut)
	}
	e := entries[0]
	if e.Jobs != 1 || e.Type != "local" || len(e.Points) == 0 || !strings.Contains(e.Key, "resumable_cnn.py") {
		t.Errorf("stored entry %+v", e)
	}
	second := run()
	predicted("second", second)
	t.Logf("first run: %d attempts, %d probes; second: %d attempts, %d probes", len(first.Timeline), probes(first), len(second.Timeline), probes(second))
	if p := probes(second); p > 1 {
		t.Errorf("the second run probed %d times (the first %d), want at most once", p, probes(first))
	}
	if len(second.Timeline) > len(first.Timeline) {
		t.Errorf("the second run made %d attempts, the first %d", len(second.Timeline), len(first.Timeline))
	}
	out, _, _ = scavctl(t, state, "models", "show", e.Signature)
	if !strings.Contains(out, "step-time model") || !strings.Contains(out, "2 job(s)") {
		t.Errorf("models show:\n%s", out)
	}
	if _, errOut, code := scavctl(t, state, "models", "forget", e.Signature, "--uid", "4242"); code == 0 || !strings.Contains(errOut, "no stored model") {
		t.Errorf("forget uid 4242's %s, who has none: exit %d, %s", e.Signature, code, errOut)
	}
	if out, errOut, code := scavctl(t, state, "models", "forget", e.Signature); code != 0 || !strings.Contains(out, "forgot 1 entry") {
		t.Errorf("models forget: exit %d\n%s%s", code, out, errOut)
	}
	if out, _, _ := scavctl(t, state, "models", "list", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("after forget: %s", out)
	}
}
