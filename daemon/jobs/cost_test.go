package jobs

import (
	"math"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
)

// TestJobCosts splits machines' charges among three attempts: a machine
// kept across a move, one released at it (its minute's minimum billed in
// the attempt in whose time it ended), one launched for the second attempt
// and still running while the job runs; once the job has ended the last
// attempt owns what followed it, and the attempts add up to the billed
// total.
func TestJobCosts(t *testing.T) {
	t0 := time.Unix(1_000_000, 0).UTC()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	end := func(s float64) *time.Time { e := at(s); return &e }
	rule := plugins.Charge{USDPerHour: 3.6, Granularity: time.Second, Minimum: time.Minute} // $0.001 a second
	ch := func(id string, start float64, stop *time.Time) plugins.Charge {
		c := rule
		c.Instance, c.Start, c.End = id, at(start), stop
		return c
	}
	j := api.Job{Attempts: []api.Attempt{{Attempt: 1, Ended: end(100)}, {Attempt: 2, Ended: end(200)}, {Attempt: 3}}}
	running := []plugins.Charge{
		ch("kept", 0, nil),        // through every attempt
		ch("short", 10, end(130)), // released early in attempt 2: 120 s, no minimum to add
		ch("tiny", 150, end(170)), // 20 s, billed 60 s in attempt 2
		ch("late", 210, nil),
	}
	jobCosts(&j, running, at(250), false)
	want := []float64{100 + 90, 100 + 30 + 60, 50 + 40} // seconds billed per attempt
	for k, w := range want {
		if got := j.Attempts[k].Cost.BilledSeconds; math.Abs(got-w) > 1e-6 {
			t.Errorf("attempt %d: %g s billed, want %g (%+v)", k+1, got, w, j.Attempts[k].Cost)
		}
	}
	// The job ends at 250; its machines are released at 255.5.
	final := []plugins.Charge{ch("kept", 0, end(255.5)), running[1], running[2], ch("late", 210, end(255.5))}
	j.Attempts[2].Ended = end(250)
	jobCosts(&j, final, at(300), true)
	var sum, billed float64
	for _, c := range final {
		billed += c.Billed(c.Seconds(at(300)))
	}
	for _, a := range j.Attempts {
		sum += a.Cost.BilledSeconds
	}
	if math.Abs(sum-billed) > 1e-6 || math.Abs(j.Cost.BilledSeconds-billed) > 1e-6 || math.Abs(j.Cost.USD-billed*0.001) > 1e-9 {
		t.Errorf("attempts add up to %g s, job %g s, $%g; the machines bill %g s", sum, j.Cost.BilledSeconds, j.Cost.USD, billed)
	}
	// kept: 256 s (255.5 rounded up); late: 60 s minimum for 45.5 s.
	if got, w := j.Attempts[2].Cost.BilledSeconds, 56.0+60; math.Abs(got-w) > 1e-6 {
		t.Errorf("last attempt: %g s billed, want %g", got, w)
	}
}

// TestJobCostsCountEveryMachine: a start that failed — its instance came
// up dead and was released — leaves a job with no attempt, or with
// machines after its last attempt; their charges are still the job's cost,
// and the record names their instances (before, a job without attempts
// showed $0 and no instance while charges.json billed them).
func TestJobCostsCountEveryMachine(t *testing.T) {
	t0 := time.Unix(1_000_000, 0).UTC()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	end := func(s float64) *time.Time { e := at(s); return &e }
	failed := plugins.Charge{Instance: "i-dead", USDPerHour: 3.6, Granularity: time.Second, Minimum: time.Minute, Start: at(0), End: end(300)}
	var j api.Job
	jobCosts(&j, []plugins.Charge{failed}, at(400), true)
	if j.Cost == nil || math.Abs(j.Cost.USD-0.3) > 1e-9 || len(j.Cost.Instances) != 1 || j.Cost.Instances[0].ID != "i-dead" {
		t.Fatalf("a job whose only start failed: cost %+v, want $0.30 for i-dead's 300 s", j.Cost)
	}
	// An attempt ran and ended at 100; a relaunch's instance died at once
	// (110 to 115, billed 60 s) while the job still runs.
	j = api.Job{Attempts: []api.Attempt{{Attempt: 1, Ended: end(100)}}}
	first := plugins.Charge{Instance: "i-1", USDPerHour: 3.6, Granularity: time.Second, Minimum: time.Minute, Start: at(0), End: end(100)}
	relaunch := plugins.Charge{Instance: "i-2", USDPerHour: 3.6, Granularity: time.Second, Minimum: time.Minute, Start: at(110), End: end(115)}
	jobCosts(&j, []plugins.Charge{first, relaunch}, at(120), false)
	if math.Abs(j.Cost.BilledSeconds-160) > 1e-6 || len(j.Cost.Instances) != 2 {
		t.Fatalf("job cost %+v: want both instances, 100 + 60 s billed", j.Cost)
	}
}
