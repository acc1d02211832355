package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/launchers/local"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// runAndWatch submits req and collects the job's output until it finishes.
func runAndWatch(t *testing.T, c *api.Client, req api.RunRequest, during func(api.Job)) (api.Job, []telemetry.LogLine, telemetry.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j, err := c.Run(ctx, req)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if during != nil {
		during(j)
	}
	var lines []telemetry.LogLine
	var final telemetry.Event
	errDone := fmt.Errorf("done")
	err = c.Output(ctx, j.ID, true, func(l *telemetry.LogLine, e *telemetry.Event) error {
		if l != nil {
			lines = append(lines, *l)
		} else if e.Kind == telemetry.EventFinished {
			final = *e
			return errDone
		}
		return nil
	})
	if err != errDone {
		t.Fatalf("follow output: %v", err)
	}
	j, err = c.Job(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	return j, lines, final
}

func TestJobLifecycle(t *testing.T) {
	_, c := startDaemon(t)
	dir := t.TempDir()

	t.Run("success", func(t *testing.T) {
		j, lines, final := runAndWatch(t, c, api.RunRequest{
			Command: []string{"/bin/sh", "-c", `echo "rank $RANK of $WORLD_SIZE batch $SCAV_LOCAL_BATCH/{batch_size}"; echo oops >&2`},
			Dir:     dir, Config: plugins.Config{Workers: 2, GlobalBatch: 8},
		}, nil)
		if j.State != api.StateSucceeded || *final.ExitCode != 0 || *j.ExitCode != 0 {
			t.Fatalf("job %s state %s exit %v, event %+v", j.ID, j.State, *j.ExitCode, final)
		}
		got := map[string]bool{}
		for _, l := range lines {
			got[fmt.Sprintf("%d %s %s", l.Rank, l.Stream, l.Line)] = true
		}
		for _, want := range []string{"0 stdout rank 0 of 2 batch 4/8", "1 stdout rank 1 of 2 batch 4/8", "0 stderr oops", "1 stderr oops"} {
			if !got[want] {
				t.Errorf("missing output line %q in %v", want, got)
			}
		}
	})

	t.Run("rank fails", func(t *testing.T) {
		j, _, final := runAndWatch(t, c, api.RunRequest{
			Command: []string{"/bin/sh", "-c", `if [ "$RANK" = 1 ]; then sleep 0.2; exit 3; fi; sleep 60`},
			Dir:     dir, Config: plugins.Config{Workers: 2}, MaxRestarts: new(int),
		}, nil)
		if j.State != api.StateFailed || *final.ExitCode != 3 || j.Result == nil || j.Result.FailedRank != 1 {
			t.Fatalf("job state %s, exit %v, result %+v; want failed, 3, rank 1", j.State, *final.ExitCode, j.Result)
		}
		if !strings.Contains(final.Message, "rank 1 exited with 3") {
			t.Errorf("final message %q does not name the failed rank", final.Message)
		}
	})

	t.Run("stop", func(t *testing.T) {
		start := time.Now()
		j, lines, final := runAndWatch(t, c, api.RunRequest{
			Command: []string{"/bin/sh", "-c", `trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.05; done`},
			Dir:     dir, Config: plugins.Config{Workers: 1}, Grace: api.Duration(5 * time.Second),
		}, func(j api.Job) {
			time.Sleep(300 * time.Millisecond)
			if _, err := c.Stop(context.Background(), j.ID, 0); err != nil {
				t.Errorf("stop: %v", err)
			}
		})
		if j.State != api.StateStopped {
			t.Fatalf("state %s (%s), want stopped", j.State, final.Message)
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("stop took %s although the worker exits on TERM", time.Since(start))
		}
		sawTerm := false
		for _, l := range lines {
			sawTerm = sawTerm || l.Line == "got TERM"
		}
		if !sawTerm {
			t.Errorf("the worker did not see SIGTERM: output %v", lines)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		for _, req := range []api.RunRequest{
			{Command: nil, Config: plugins.Config{Workers: 1}},
			{Command: []string{"true"}, Config: plugins.Config{Workers: 0}},
			{Command: []string{"true"}, Config: plugins.Config{Workers: 3, GlobalBatch: 64}},
			{Command: []string{"true"}, Config: plugins.Config{Workers: 1}, Name: "a.b"},
		} {
			if _, err := c.Run(context.Background(), req); err == nil || !strings.Contains(err.Error(), "bad request") {
				t.Errorf("Run(%+v) = %v, want a bad-request error", req, err)
			}
		}
		if _, err := c.Job(context.Background(), "nope-000000"); err == nil || !strings.Contains(err.Error(), "no such job") {
			t.Errorf("Job(unknown) = %v, want no such job", err)
		}
	})

	t.Run("command not found", func(t *testing.T) {
		j, _, final := runAndWatch(t, c, api.RunRequest{Command: []string{"/nonexistent/train"}, Dir: dir, Config: plugins.Config{Workers: 1}}, nil)
		if j.State != api.StateFailed || *final.ExitCode == 0 || !strings.Contains(final.Message, "/nonexistent/train") {
			t.Fatalf("state %s exit %v message %q; want failed naming the command", j.State, *final.ExitCode, final.Message)
		}
	})
}

func TestMoveUninstrumentedJobBySignal(t *testing.T) {
	for _, c := range []struct {
		name        string
		to          int
		wantWorkers int // of the attempt that finished the job
		wantMove    string
	}{
		{"to 2 workers", 2, 2, ""},
		{"to an impossible count goes back", 3, 1, "could not start"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			d, cl := startDaemonWith(t, "scavd-move-", Config{Listen: "127.0.0.1:0",
				Launcher: local.New(local.Options{Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), MaxWorkers: 2})})
			dir := d.cfg.StateDir
			var moveErr error
			j, lines, final := runAndWatch(t, cl, api.RunRequest{
				Command: []string{"/bin/sh", "-c", movableScript}, Dir: dir,
				Config: plugins.Config{Workers: 1}, CheckpointSignal: "SIGUSR1", Grace: api.Duration(10 * time.Second),
			}, func(j api.Job) {
				time.Sleep(300 * time.Millisecond)
				_, moveErr = cl.Move(ctx, j.ID, plugins.Config{Workers: c.to}, "test")
			})
			if moveErr != nil {
				t.Fatalf("move: %v", moveErr)
			}
			if j.State != api.StateSucceeded || *final.ExitCode != 0 {
				t.Fatalf("job %s: state %s, exit %d, %s", j.ID, j.State, *final.ExitCode, final.Message)
			}
			last := j.Attempts[len(j.Attempts)-1]
			if len(j.Attempts) != 2 || last.Config.Workers != c.wantWorkers || last.Restore != j.CheckpointDir {
				t.Fatalf("attempts %+v; want 2, the last at %d workers restoring from %s", j.Attempts, c.wantWorkers, j.CheckpointDir)
			}
			if j.Attempts[0].Move == nil || !strings.HasPrefix(j.Attempts[0].EndReason, "moved") {
				t.Errorf("first attempt's end not recorded as a move: %+v", j.Attempts[0])
			}
			want := fmt.Sprintf("attempt %d world %d rank %d restore=%s", last.Attempt, c.wantWorkers, c.wantWorkers-1, j.CheckpointDir)
			found := false
			for _, l := range lines {
				found = found || l.Line == want
			}
			if !found {
				t.Errorf("no line %q in %v", want, lines)
			}
			if _, err := os.Stat(filepath.Join(j.CheckpointDir, "ckpt-1")); err != nil {
				t.Errorf("the first attempt did not checkpoint: %v", err)
			}
			if c.wantMove != "" {
				var msgs []string
				_ = cl.Output(ctx, j.ID, false, func(_ *telemetry.LogLine, e *telemetry.Event) error {
					if e != nil && e.Kind == telemetry.EventMoved {
						msgs = append(msgs, e.Message)
					}
					return nil
				})
				if !strings.Contains(strings.Join(msgs, "\n"), c.wantMove) {
					t.Errorf("move events %q do not say %q", msgs, c.wantMove)
				}
			}
		})
	}
}

func TestMoveRefusedWithoutAWayToCheckpoint(t *testing.T) {
	_, c := startDaemon(t)
	ctx := context.Background()
	j, _, _ := runAndWatch(t, c, api.RunRequest{Command: []string{"/bin/sh", "-c", "sleep 1"}, Dir: os.TempDir(), Config: plugins.Config{Workers: 1}},
		func(j api.Job) {
			time.Sleep(200 * time.Millisecond)
			_, err := c.Move(ctx, j.ID, plugins.Config{Workers: 2}, "test")
			if err == nil || !strings.Contains(err.Error(), "--checkpoint-signal") {
				t.Errorf("move of a job without telemetry or checkpoint signal: %v", err)
			}
		})
	if j.State != api.StateSucceeded || len(j.Attempts) != 1 {
		t.Fatalf("a refused move disturbed the job: %+v", j)
	}
}

// selfNamedCheckpoint is a worker that names its own checkpoint (no
// manifest) and, asked to checkpoint, writes it and exits 0 without
// acknowledging: what the daemon sees when the acknowledgement is late (a
// flood of another user's telemetry delayed one past the workers' exit). It
// counts its steps on from start_step() and stops at step 300.
const selfNamedCheckpoint = `import os, sys, time, scavenger
step = scavenger.start_step()
print("attempt %s starts at step %d" % (os.environ["SCAV_ATTEMPT"], step), flush=True)
while step < 300:
    time.sleep(0.01)
    step += 1
    scavenger.step(samples=1)
    if scavenger.should_checkpoint():
        with open(os.path.join(scavenger.checkpoint_dir(), "ck"), "w") as f:
            f.write(str(step))
        break
scavenger.close()
`

// TestMoveGoesOnFromTheStepOfAnUnacknowledgedCheckpoint moves a job whose
// workers exit 0 on the checkpoint request without acknowledging it: the
// next attempt restores the directory they wrote their checkpoint in and
// counts on from their last step, not from step 0 (all of it done again).
func TestMoveGoesOnFromTheStepOfAnUnacknowledgedCheckpoint(t *testing.T) {
	ctx := context.Background()
	d, cl := startDaemonWith(t, "scavd-unacked-", Config{Listen: "127.0.0.1:0",
		Launcher: local.New(local.Options{Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), MaxWorkers: 2})})
	var moveErr error
	j, lines, final := runAndWatch(t, cl, api.RunRequest{
		Command: []string{testPython(), "-c", selfNamedCheckpoint}, Dir: d.cfg.StateDir,
		Config: plugins.Config{Workers: 1}, Grace: api.Duration(20 * time.Second),
	}, func(j api.Job) {
		waitFor(t, 30*time.Second, "the job's step 20", func() bool {
			rec, ok, err := cl.LastStep(ctx, j.ID)
			return err == nil && ok && rec.Step >= 20
		})
		_, moveErr = cl.Move(ctx, j.ID, plugins.Config{Workers: 2}, "test")
	})
	if moveErr != nil {
		t.Fatalf("move: %v", moveErr)
	}
	if j.State != api.StateSucceeded || *final.ExitCode != 0 || len(j.Attempts) != 2 {
		t.Fatalf("job %s: state %s, exit %d, %d attempts; want succeeded after 2 (%s)", j.ID, j.State, *final.ExitCode, len(j.Attempts), final.Message)
	}
	b, err := os.ReadFile(filepath.Join(j.CheckpointDir, "ck"))
	if err != nil {
		t.Fatalf("the first attempt did not checkpoint: %v", err)
	}
	want := fmt.Sprintf("attempt 2 starts at step %s", b)
	var starts []string
	for _, l := range lines {
		if strings.HasPrefix(l.Line, "attempt 2 starts") {
			starts = append(starts, l.Line)
		}
	}
	if len(starts) != 2 || starts[0] != want || starts[1] != want {
		t.Fatalf("the second attempt's ranks said %q; want %q from each (its checkpoint's step)", starts, want)
	}
	if a := j.Attempts[1]; a.Restore != j.CheckpointDir {
		t.Errorf("attempt 2 restored %q, want the checkpoint directory %s", a.Restore, j.CheckpointDir)
	}
}
