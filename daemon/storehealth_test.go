package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/damage"
	"github.com/scavenger-ml/scavenger/internal/testdir"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// storeJobs and storeSteps size the history the damaged-store tests damage.
const (
	storeJobs  = 8
	storeSteps = 200
)

// storeWithHistory runs storeJobs short jobs on a daemon on state, each
// with storeSteps step records in the step stream, and stops the daemon.
func storeWithHistory(t *testing.T, state string) []api.Job {
	t.Helper()
	ctx := context.Background()
	d, c := startAt(t, state, false)
	var js []api.Job
	for i := range storeJobs {
		j, err := c.Run(ctx, api.RunRequest{Name: fmt.Sprintf("hist%d", i), Command: []string{"/bin/sh", "-c", "exit 0"}, Dir: t.TempDir(), Config: plugins.Config{Workers: 1}})
		if err != nil {
			t.Fatal(err)
		}
		for s := 1; s <= storeSteps; s++ {
			b, _ := json.Marshal(telemetry.StepRecord{V: 1, Job: j.ID, Attempt: 1, World: 1, Step: int64(s), Time: float64(s), Seconds: 0.01, Samples: 8})
			if _, err := d.store.JS.Publish(ctx, telemetry.StepSubject(j.ID), append(b, '\n')); err != nil {
				t.Fatal(err)
			}
		}
		follow(t, c, j.ID, time.Minute)
		js = append(js, j)
	}
	c.Close()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	return js
}

// streamBlock is the first block of stream in the store of state.
func streamBlock(state, stream string) string {
	return filepath.Join(state, "jetstream", "jetstream", "$G", "streams", stream, "msgs", "1.blk")
}

// reachable counts, each within a deadline, the jobs of js that the
// daemon lists as succeeded and their step records it serves.
func reachable(t *testing.T, c *api.Client, js []api.Job) (succeeded, records int, listErr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	listed, listErr := c.Jobs(ctx)
	state := map[string]api.JobState{}
	for _, j := range listed {
		state[j.ID] = j.State
	}
	for _, j := range js {
		if state[j.ID] == api.StateSucceeded {
			succeeded++
		}
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = c.Steps(sctx, j.ID, false, func(telemetry.StepRecord) error { records++; return nil })
		cancel()
	}
	return succeeded, records, listErr
}

// TestDamagedStoreDegrades: the damage of issue 21's table, each on a
// store holding jobs and their step records. The daemon starts, serves
// every job with its state and every step record but those the damage
// overwrote, says what it found (status, metric), and runs a new job to
// its end.
func TestDamagedStoreDegrades(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, state string, js []api.Job)
		// lostAtMost bounds the step records lost; the others are all kept.
		lostAtMost int
	}{
		{"512 B of garbage in a job's newest record in the job store", func(t *testing.T, state string, js []api.Job) {
			path := streamBlock(state, jobStream)
			b, _ := os.ReadFile(path)
			at := bytes.LastIndex(b, []byte(js[storeJobs/2].ID))
			damage.Garbage(t, path, int64(at), 512)
		}, 0},
		{"job store truncated to 0", func(t *testing.T, state string, _ []api.Job) {
			if err := os.Truncate(streamBlock(state, jobStream), 0); err != nil {
				t.Fatal(err)
			}
		}, 0},
		{"job store's last 100 B cut", func(t *testing.T, state string, _ []api.Job) {
			path := streamBlock(state, jobStream)
			if err := os.Truncate(path, damage.Size(t, path)-100); err != nil {
				t.Fatal(err)
			}
		}, 0},
		{"the output stream's files deleted", func(t *testing.T, state string, _ []api.Job) {
			if err := os.RemoveAll(filepath.Dir(filepath.Dir(streamBlock(state, telemetry.OutputStream)))); err != nil {
				t.Fatal(err)
			}
		}, 0},
		{"4 KB of garbage in the step stream's block", func(t *testing.T, state string, _ []api.Job) {
			path := streamBlock(state, telemetry.StepStream)
			damage.Garbage(t, path, damage.Size(t, path)/3, 4096)
		}, 4096/150 + 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := testdir.Short(t, "scavd-store-")
			js := storeWithHistory(t, state)
			tc.damage(t, state, js)
			lines, ok, err := CheckStore(state)
			t.Logf("scavd --check-store: %s", strings.Join(lines, "\n"))
			if err != nil || ok {
				t.Errorf("the check finds no damage (%v)", err)
			}
			d, c := startAt(t, state, false)
			defer d.Close()
			defer c.Close()
			succeeded, records, err := reachable(t, c, js)
			info, _ := c.Ping(context.Background())
			t.Logf("after the damage: %d of %d jobs succeeded, %d of %d step records (list error: %v); status says:\n%s",
				succeeded, storeJobs, records, storeJobs*storeSteps, err, strings.Join(info.Store, "\n"))
			if err != nil || succeeded != storeJobs {
				t.Errorf("%d of %d jobs listed as succeeded (list error: %v)", succeeded, storeJobs, err)
			}
			if lost := storeJobs*storeSteps - records; lost > tc.lostAtMost {
				t.Errorf("%d step records lost, want at most %d", lost, tc.lostAtMost)
			}
			if len(info.Store) == 0 {
				t.Error("status says nothing of the damage")
			}
			j, err := c.Run(context.Background(), api.RunRequest{Command: []string{"/bin/sh", "-c", "exit 0"}, Dir: t.TempDir(), Config: plugins.Config{Workers: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if final := follow(t, c, j.ID, 30*time.Second); final.ExitCode == nil || *final.ExitCode != 0 {
				t.Errorf("a new job ended %+v", final)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if lines, ok, err := CheckStore(state); err != nil || !ok {
				t.Errorf("after the daemon's repair the check says %s (%v)", strings.Join(lines, "\n"), err)
			}
		})
	}
}

// TestStopIsBoundedByTheDaemonsGrace (issue 21): a stopping daemon gives a
// job that ignores SIGTERM and has a long grace no more than its own stop
// grace, then kills it: SIGTERM always stops scavd within its grace.
func TestStopIsBoundedByTheDaemonsGrace(t *testing.T) {
	d, c := startDaemonWith(t, "scavd-stop-", Config{Listen: "127.0.0.1:0", StopGrace: 2 * time.Second})
	j, err := c.Run(context.Background(), api.RunRequest{Command: []string{"/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"}, Dir: t.TempDir(),
		Config: plugins.Config{Workers: 1}, Grace: api.Duration(30 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the job to run", func() bool {
		got, err := c.Job(context.Background(), j.ID)
		return err == nil && got.State == api.StateRunning
	})
	began := time.Now()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 2*time.Second+15*time.Second {
		t.Errorf("the daemon took %s to stop, with a stop grace of 2s", took)
	}
}
