package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/stepstats"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// TestJobsPagesKeepsAndReadsRanges: jobs lists the newest --limit and says
// how to see the older ones, --before pages back, a name is the newest job
// of that name, keep marks a job, and steps reads the last records alone
// and the summary of them all.
func TestJobsPagesKeepsAndReadsRanges(t *testing.T) {
	state := stateDir(t)
	script := filepath.Join(t.TempDir(), "steps.py")
	if err := os.WriteFile(script, []byte("import scavenger\nfor i in range(12):\n    scavenger.step(samples=4, loss=1.0 / (i + 1))\nscavenger.close()\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		_, e, code := scavctl(t, state, "run", "--name", "pager", "--workers", "1", "--batch-size", "4", "--", pythonBin, script)
		if code != 0 {
			t.Fatalf("run %d: exit %d\n%s", i, code, e)
		}
		ids = append(ids, jobID(t, e))
	}
	out, e, code := scavctl(t, state, "jobs", "--limit", "2")
	rows := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(rows) != 3 || !strings.HasPrefix(rows[1], ids[1]) || !strings.HasPrefix(rows[2], ids[2]) ||
		!strings.Contains(e, "1 older job is not listed: --before "+ids[1]) {
		t.Fatalf("jobs --limit 2: exit %d\n%s%s", code, out, e)
	}
	out, e, _ = scavctl(t, state, "jobs", "--limit", "2", "--before", ids[1])
	if rows := strings.Split(strings.TrimSpace(out), "\n"); len(rows) != 2 || !strings.HasPrefix(rows[1], ids[0]) || strings.Contains(e, "not listed") {
		t.Errorf("the page before %s:\n%s%s", ids[1], out, e)
	}
	if out, e, _ := scavctl(t, state, "keep", "pager"); !strings.Contains(out, "job "+ids[2]+" is kept") || !strings.Contains(e, "3 jobs are named pager") {
		t.Errorf("keep pager:\n%s%s", out, e)
	}
	var recs []telemetry.StepRecord
	for _, l := range strings.Split(strings.TrimSpace(mustOut(t, state, "steps", ids[0], "--last", "3", "-o", "json")), "\n") {
		var r telemetry.StepRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("steps --last 3: %v: %s", err, l)
		}
		recs = append(recs, r)
	}
	if len(recs) != 3 || recs[0].Step != 10 || recs[2].Step != 12 {
		t.Errorf("steps --last 3: %+v, want steps 10..12", recs)
	}
	var sum stepstats.Summary
	if err := json.Unmarshal([]byte(mustOut(t, state, "steps", ids[0], "--summary", "-o", "json")), &sum); err != nil || sum.Records != 12 || sum.LastStep != 12 || sum.Missing != 0 {
		t.Errorf("steps --summary: %+v, %v; want 12 records, steps to 12", sum, err)
	}
	table := mustOut(t, state, "steps", ids[0], "--last", "2")
	if lines := strings.Split(strings.TrimSpace(table), "\n"); len(lines) != 3 || !strings.Contains(lines[0], "STEP") || !strings.HasPrefix(strings.TrimSpace(lines[2]), "12 ") {
		t.Errorf("steps --last 2 as a table:\n%s", table)
	}
}

// mustOut runs scavctl and returns its standard output; it must succeed.
func mustOut(t *testing.T, state string, args ...string) string {
	t.Helper()
	out, e, code := scavctl(t, state, args...)
	if code != 0 {
		t.Fatalf("scavctl %v: exit %d\n%s%s", args, code, out, e)
	}
	return out
}
