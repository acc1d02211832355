package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/damage"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// The store trials (issue 21): a store holding finished jobs of the fault
// worker is damaged while no daemon runs; a daemon then starts on it. Each
// trial measures what a daemon that did not check its store (before:
// Config.asBefore) could reach of the same damaged store, on a copy, and
// what this one reaches: the jobs it lists as they ended, and their step
// records.

// storeTrialJobs and storeTrialSteps size the history a store trial damages.
const (
	storeTrialJobs  = 3
	storeTrialSteps = 200
)

// storeDaemon starts a daemon on state (faultDaemon's), as before the
// store's check when before is set.
func storeDaemon(t *testing.T, state string, before bool) (*Daemon, *api.Client) {
	t.Helper()
	return faultDaemon(t, Config{StateDir: state, asBefore: before})
}

// workerHistory runs storeTrialJobs jobs of the fault worker on a daemon on
// state to their ends, and stops the daemon; it returns the jobs.
func workerHistory(t *testing.T, python, state string) []api.Job {
	t.Helper()
	d, c := storeDaemon(t, state, false)
	var js []api.Job
	for range storeTrialJobs {
		side := t.TempDir()
		j := submitWorkers(t, c, python, side, storeTrialSteps, 40, false)
		if final := follow(t, c, j.ID, 3*time.Minute); final.ExitCode == nil || *final.ExitCode != 0 {
			t.Fatalf("job %s ended %+v before any damage", j.ID, final)
		}
		js = append(js, j)
	}
	c.Close()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	return js
}

// reach is what a daemon serves of a damaged store's jobs: how many it
// lists as succeeded (as they all ended), and their step records lost
// (steps of a rank with no record).
type reach struct {
	wrong, lost int
}

// reachOf counts what the daemon of c serves of js, each read within a deadline.
func reachOf(t *testing.T, c *api.Client, js []api.Job) reach {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	listed, _ := c.Jobs(ctx)
	state := map[string]api.JobState{}
	for _, j := range listed {
		state[j.ID] = j.State
	}
	var r reach
	for _, j := range js {
		if state[j.ID] != api.StateSucceeded {
			r.wrong++
		}
		seen := map[[2]int64]bool{}
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = c.Steps(sctx, j.ID, false, func(rec telemetry.StepRecord) error {
			seen[[2]int64{int64(rec.Rank), rec.Step}] = true
			return nil
		})
		cancel()
		r.lost += 2*storeTrialSteps - len(seen)
	}
	return r
}

// storeTrial builds a history, damages it, and measures before and after:
// figure is what the row's figure counts (lost or wrong), of both.
func storeTrial(t *testing.T, python string, hurt func(t *testing.T, state string, js []api.Job), wrongFigure bool) (trialResult, reach, reach, *Daemon) {
	state := scavdStateDir(t)
	js := workerHistory(t, python, state)
	hurt(t, state, js)
	copied := scavdStateDir(t)
	if out, err := exec.Command("cp", "-a", state+"/.", copied).CombinedOutput(); err != nil { // modes kept: the nats key must stay 0600
		t.Fatalf("copy the damaged store: %v: %s", err, out)
	}
	dBefore, cBefore := storeDaemon(t, copied, true)
	before := reachOf(t, cBefore, js)
	cBefore.Close()
	dBefore.Close()
	d, c := storeDaemon(t, state, false)
	after := reachOf(t, c, js)
	r := trialResult{ok: after.wrong == 0, lost: after.lost, attempts: 1, note: fmt.Sprintf("before: %+v, after: %+v; status: %s", before, after, strings.Join(d.info().Store, "; "))}
	r.figure, r.before = float64(after.lost), float64(before.lost)
	if wrongFigure {
		r.figure, r.before = float64(after.wrong), float64(before.wrong)
	}
	for _, j := range js {
		p, z, f := leftovers(j)
		r.procs, r.zombies, r.leftover = r.procs+p, r.zombies+z, r.leftover+f
	}
	return r, before, after, d
}

// jobStoreGarbageTrial writes 512 B of garbage over the newest record of
// one job in the job store's block.
func jobStoreGarbageTrial(t *testing.T, python string) trialResult {
	r, _, _, _ := storeTrial(t, python, func(t *testing.T, state string, js []api.Job) {
		path := streamBlock(state, jobStream)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		damage.Garbage(t, path, int64(bytes.LastIndex(b, []byte(js[1].ID))), 512)
	}, false)
	return r
}

// jobStoreEmptiedTrial truncates the job store's block to nothing.
func jobStoreEmptiedTrial(t *testing.T, python string) trialResult {
	r, _, _, _ := storeTrial(t, python, func(t *testing.T, state string, _ []api.Job) {
		if err := os.Truncate(streamBlock(state, jobStream), 0); err != nil {
			t.Fatal(err)
		}
	}, false)
	return r
}

// jobStoreCutTrial cuts the last 100 bytes of the job store's block: the
// last job's final record is lost, and the one before it (running) is all
// the store itself has.
func jobStoreCutTrial(t *testing.T, python string) trialResult {
	r, _, _, _ := storeTrial(t, python, func(t *testing.T, state string, _ []api.Job) {
		path := streamBlock(state, jobStream)
		if err := os.Truncate(path, damage.Size(t, path)-100); err != nil {
			t.Fatal(err)
		}
	}, true)
	return r
}

// outputDeletedTrial deletes the output stream's files: the output is gone
// (its only copy), but not silently: status must say so, and the jobs and
// their step records must be whole.
func outputDeletedTrial(t *testing.T, python string) trialResult {
	r, _, _, d := storeTrial(t, python, func(t *testing.T, state string, _ []api.Job) {
		if err := os.RemoveAll(filepath.Dir(filepath.Dir(streamBlock(state, telemetry.OutputStream)))); err != nil {
			t.Fatal(err)
		}
	}, false)
	r.ok = r.ok && strings.Contains(strings.Join(d.info().Store, "\n"), "stream "+telemetry.OutputStream+" was not in the store")
	return r
}

// stepStreamGarbageTrial writes 4 KB of garbage into the step stream's
// block, a third of the way in. The records of the messages the garbage
// touched are gone (no copy of them is left anywhere): records lost counts
// those lost beyond them, the figure all.
func stepStreamGarbageTrial(t *testing.T, python string) trialResult {
	var touched int
	r, _, after, _ := storeTrial(t, python, func(t *testing.T, state string, _ []api.Job) {
		path := streamBlock(state, telemetry.StepStream)
		whole, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		at := int64(len(whole) / 3)
		damage.Garbage(t, path, at, 4096)
		touched = recordsTouched(whole, int(at), 4096)
	}, false)
	r.lost = max(0, after.lost-touched)
	r.ok = after.wrong == 0 && r.lost == 0
	r.note += fmt.Sprintf("; the garbage touched messages of %d records", touched)
	return r
}

// recordsTouched counts the step records in the messages of block (as it
// was before the damage) that the n bytes from off touch. A message's
// records are consecutive JSON lines; what lies between two runs of them
// is the next message's header and subject (and the previous one's hash),
// so a message spans from the end of the run before it to the end of its
// own, and its hash.
func recordsTouched(block []byte, off, n int) int {
	touched, prevEnd := 0, 0
	for i := 0; i < len(block); {
		start := bytes.Index(block[i:], []byte(`{"`))
		if start < 0 {
			break
		}
		start += i
		end, records := start, 0
		for end < len(block) && bytes.HasPrefix(block[end:], []byte(`{"`)) {
			nl := bytes.IndexByte(block[end:], '\n')
			if nl < 0 {
				break
			}
			end, records = end+nl+1, records+1
		}
		if records == 0 {
			i = start + 1
			continue
		}
		if off < end+8 && off+n > prevEnd {
			touched += records
		}
		prevEnd, i = end+8, end
	}
	return touched
}

// smallDiskTrial starts scavd with the state directory on a 2 GB disk with
// 148 MB free, and on a 200 MB disk: each starts and runs a job of the
// fault worker to its end; on a 20 MB disk it refuses to start, naming the
// space it needs and state_dir.
func smallDiskTrial(t *testing.T, python string) trialResult {
	const total = 200
	r := trialResult{ok: true, attempts: 1}
	for _, disk := range []struct {
		size, free int64
	}{{2 << 30, 148 << 20}, {200 << 20, 0}} {
		dir := smallDisk(t, disk.size)
		if disk.free > 0 {
			fill(t, dir, disk.free)
		}
		d, err := Start(context.Background(), Config{StateDir: filepath.Join(dir, "state"), Listen: "127.0.0.1:0", Node: "n1"},
			zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
		if err != nil {
			r.ok, r.note = false, fmt.Sprintf("refused on %d MB: %v", disk.size>>20, err)
			continue
		}
		c, err := api.Dial(context.Background(), d.APISocket(), 5*time.Second)
		if err != nil {
			d.Close()
			t.Fatal(err)
		}
		j := submitWorkers(t, c, python, t.TempDir(), total, 40, false)
		if final := follow(t, c, j.ID, 3*time.Minute); final.ExitCode == nil || *final.ExitCode != 0 {
			r.ok, r.note = false, fmt.Sprintf("the job on %d MB ended %+v", disk.size>>20, final)
		}
		j, _ = c.Job(context.Background(), j.ID)
		var one trialResult
		settle(t, c, j, total, &one)
		r.add(one)
		c.Close()
		if err := d.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	tiny := smallDisk(t, 20<<20)
	d, err := Start(context.Background(), Config{StateDir: filepath.Join(tiny, "state"), Listen: "127.0.0.1:0", Node: "n1"},
		zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	if err == nil {
		d.Close()
		r.ok, r.note = false, "started on a 20 MB disk"
	} else if !strings.Contains(err.Error(), "need at least") || !strings.Contains(err.Error(), "state_dir") {
		r.ok, r.note = false, "refused without saying what it needs: "+err.Error()
	}
	return r
}
