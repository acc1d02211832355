package jobs

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

func TestStallTimeout(t *testing.T) {
	for _, c := range []struct {
		set     time.Duration
		slowest float64
		want    time.Duration
	}{
		{0, 0, api.MinStallTimeout},
		{0, 0.5, api.MinStallTimeout},
		{0, 60, 10 * time.Minute},
		{3 * time.Second, 60, 3 * time.Second},
	} {
		if got := stallTimeout(c.set, c.slowest); got != c.want {
			t.Errorf("stallTimeout(%s, %g) = %s, want %s", c.set, c.slowest, got, c.want)
		}
	}
}

// publishSteps publishes step records first..last of rank 0 of job's attempt.
func publishSteps(t *testing.T, nc *nats.Conn, job string, attempt int, first, last int64) {
	t.Helper()
	for s := first; s <= last; s++ {
		b, _ := json.Marshal(telemetry.StepRecord{V: 1, Job: job, Attempt: attempt, World: 1, Step: s, Time: float64(time.Now().UnixNano()) / 1e9, Seconds: 0.01, Samples: 8})
		if err := nc.Publish(telemetry.StepSubject(job), append(b, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	_ = nc.Flush()
}

// recordOf polls job id's record until cond holds (a minute at most).
func recordOf(t *testing.T, g *Registry, id, what string, cond func(api.Job) bool) api.Job {
	t.Helper()
	var j api.Job
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var err error
		if j, err = g.Get(context.Background(), id); err == nil && cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: timed out waiting for %s (record %+v)", id, what, j)
		}
	}
}

// TestStalledJobIsMarkedAndRestarted (issue 21): a job whose ranks stop
// reporting steps is marked stalled (record, event) and unmarked when
// steps come again; with --on-stall restart it restarts from its
// checkpoint, the stall named as the crash.
func TestStalledJobIsMarkedAndRestarted(t *testing.T) {
	g, _, nc := registry(t)
	run := func(onStall string) api.Job {
		j, err := g.Submit(context.Background(), api.RunRequest{Command: []string{"/bin/sh", "-c", "sleep 600"}, Dir: t.TempDir(),
			Config: plugins.Config{Workers: 1}, Grace: api.Duration(time.Second),
			Faults: api.Faults{StallTimeout: api.Duration(2 * time.Second), OnStall: onStall}}, me())
		if err != nil {
			t.Fatal(err)
		}
		recordOf(t, g, j.ID, "its first attempt", func(j api.Job) bool { return j.State == api.StateRunning })
		publishSteps(t, nc, j.ID, 1, 1, 5)
		return j
	}
	j := run(api.StallReport)
	evs := followEvents(t, nc, j.ID)
	got := recordOf(t, g, j.ID, "the stall", func(j api.Job) bool { return j.Stalled != nil })
	if got.Stalled.Step != 5 || got.State != api.StateRunning {
		t.Errorf("stalled %+v in state %s; want at step 5, running", got.Stalled, got.State)
	}
	publishSteps(t, nc, j.ID, 1, 6, 6)
	recordOf(t, g, j.ID, "the stall to clear", func(j api.Job) bool { return j.Stalled == nil })
	var said []string
	for _, e := range evs() {
		if e.Kind == telemetry.EventStalled {
			said = append(said, e.Message)
		}
	}
	if len(said) != 2 || !strings.Contains(said[0], "stalled: its ranks reported no step for") || !strings.Contains(said[1], "steps again") {
		t.Errorf("stall events %q", said)
	}
	if _, err := g.Stop(j.ID, 0); err != nil {
		t.Fatal(err)
	}

	j = run(api.StallRestart)
	got = recordOf(t, g, j.ID, "a restart after the stall", func(j api.Job) bool { return len(j.Attempts) >= 2 })
	if why := got.Attempts[0].EndReason; !strings.Contains(why, "its ranks reported no step for") || !strings.Contains(why, "(stalled); restart 1 of 3") {
		t.Errorf("attempt 1 ended %q, want the stall named", why)
	}
	if _, err := g.Stop(j.ID, 0); err != nil {
		t.Fatal(err)
	}
}

// TestNaNLossIsAnEvent (issue 23): a loss that turns NaN is recorded and
// published once; a job that ends with it did not simply succeed; with
// --on-nan stop the job is stopped, saying why.
func TestNaNLossIsAnEvent(t *testing.T) {
	g, _, nc := registry(t)
	nan := math.NaN()
	for _, onNaN := range []string{api.NaNWarn, api.NaNStop} {
		t.Run(onNaN, func(t *testing.T) {
			j, err := g.Submit(context.Background(), api.RunRequest{Command: []string{"/bin/sh", "-c", "while [ ! -e done ]; do sleep 0.05; done"}, Dir: t.TempDir(),
				Config: plugins.Config{Workers: 1}, Grace: api.Duration(time.Second), Faults: api.Faults{OnNaN: onNaN}}, me())
			if err != nil {
				t.Fatal(err)
			}
			evs := followEvents(t, nc, j.ID)
			recordOf(t, g, j.ID, "its first attempt", func(j api.Job) bool { return j.State == api.StateRunning })
			r := g.running(j.ID)
			one := 1.0
			r.prog.saw(telemetry.StepRecord{Job: j.ID, Attempt: 1, Step: 1, Loss: &one})
			r.prog.saw(telemetry.StepRecord{Job: j.ID, Attempt: 1, Step: 2, Loss: &nan}) // until the wire carries NaN (telemetry, issue 21)
			got := recordOf(t, g, j.ID, "the bad loss", func(j api.Job) bool { return j.BadLoss != nil })
			if got.BadLoss.Step != 2 || got.BadLoss.Value != "NaN" {
				t.Errorf("bad loss %+v, want NaN at step 2", got.BadLoss)
			}
			if onNaN == api.NaNWarn {
				touch(t, j.Dir, "done")
			}
			got = waitEnd(t, g, j.ID, time.Minute)
			want := map[string]string{api.NaNWarn: "all workers exited 0, but its last loss was NaN (NaN since step 2): the model did not train",
				api.NaNStop: "stopped: the loss turned NaN at step 2 (--on-nan stop)"}[onNaN]
			if !strings.Contains(got.Message, want) {
				t.Errorf("ended %s: %q; want it to say %q", got.State, got.Message, want)
			}
			n := 0
			for _, e := range evs() {
				if e.Kind == telemetry.EventBadLoss {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d bad-loss events, want 1", n)
			}
		})
	}
}

// touch makes an empty file dir/name.
func touch(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
