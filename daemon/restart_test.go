package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/jobs"
	"github.com/scavenger-ml/scavenger/internal/testdir"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// checkpointingJob writes a checkpoint manifest on its first attempt, says
// what it was started with in ./attempt-N, and runs until SIGTERM.
const checkpointingJob = `echo "restore=${SCAV_RESTORE:-none} mine=$MINE" > attempt-$SCAV_ATTEMPT
if [ -z "$SCAV_RESTORE" ]; then
  printf x > "$SCAV_CHECKPOINT_DIR/ckpt-7"
  printf '{"format":"scavenger.manifest/1","checkpoint":"ckpt-7","step":7,"size":1}' > "$SCAV_CHECKPOINT_DIR/latest.json"
fi
trap 'exit 0' TERM
sleep 60 & wait`

func startAt(t *testing.T, state string, resume bool) (*Daemon, *api.Client) {
	t.Helper()
	ctx := context.Background()
	d, err := Start(ctx, Config{StateDir: state, Listen: "127.0.0.1:0", Node: "n1", ResumeJobs: resume},
		zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatalf("start daemon: %v", err)
	}
	c, err := api.Dial(ctx, d.APISocket(), 5*time.Second)
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	return d, c
}

// TestRestartResumesStoppedJobs: a daemon that stops checkpoints its job;
// the next one on the same state directory resumes it from that checkpoint
// with the job's own environment.
func TestRestartResumesStoppedJobs(t *testing.T) {
	ctx := context.Background()
	state := testdir.Short(t, "scavd-restart-")
	work := t.TempDir()

	d1, c1 := startAt(t, state, true)
	j, err := c1.Run(ctx, api.RunRequest{Command: []string{"/bin/sh", "-c", checkpointingJob}, Dir: work,
		Env: []string{"MINE=kept", "PATH=" + os.Getenv("PATH")}, Config: plugins.Config{Workers: 1}, Grace: api.Duration(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a checkpoint", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(j.CheckpointDir, "latest.json"))
		return err == nil
	})
	c1.Close()
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, jobs.RestartSubdir, j.ID+".json")); err != nil {
		t.Fatalf("the job's environment was not kept: %v", err)
	}

	d2, c2 := startAt(t, state, true)
	defer d2.Close()
	defer c2.Close()
	var got api.Job
	eventually(t, "the job resumed", 10*time.Second, func() bool {
		got, err = c2.Job(ctx, j.ID)
		return err == nil && got.State == api.StateRunning && got.Attempt == 2
	})
	if a := got.Attempts; len(a) != 2 || a[0].EndReason != string(api.StateStopped) || a[1].Restore != filepath.Join(j.CheckpointDir, "ckpt-7") {
		t.Errorf("attempts %+v", a)
	}
	var second []byte
	eventually(t, "the second attempt's output", 10*time.Second, func() bool {
		second, err = os.ReadFile(filepath.Join(work, "attempt-2"))
		return err == nil && len(second) > 0
	})
	if want := "restore=" + filepath.Join(j.CheckpointDir, "ckpt-7") + " mine=kept\n"; string(second) != want {
		t.Errorf("second attempt started with %q, want %q", second, want)
	}

	// Stopped by its user, it is not resumed by the next daemon.
	if _, err := c2.Stop(ctx, j.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := d2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, jobs.RestartSubdir, j.ID+".json")); !os.IsNotExist(err) {
		t.Errorf("the environment of a job stopped by its user is kept: %v", err)
	}
}

// TestRestartSettlesLostJobs: records left "running" by a daemon that died
// are marked lost, the leftover workers of one are killed (and nothing that
// merely has a reused process-group id), and all resume from their last
// checkpoint.
func TestRestartSettlesLostJobs(t *testing.T) {
	ctx := context.Background()
	state := testdir.Short(t, "scavd-lost-")
	work := t.TempDir()

	// Workers that outlived their daemon: a process group of its own, with
	// the job's environment; and an unrelated program whose process group
	// has the id an old record names (ids are reused).
	leftover := exec.Command("sleep", "60")
	leftover.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	leftover.Env = append(os.Environ(), "SCAV_JOB_ID=alive-000001", "SCAV_ATTEMPT=1")
	stranger := exec.Command("sleep", "60")
	stranger.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	for _, c := range []*exec.Cmd{leftover, stranger} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { _ = stranger.Process.Kill(); _ = stranger.Wait() }()
	leftoverDone := make(chan error, 1)
	go func() { leftoverDone <- leftover.Wait() }()
	defer func() { _ = leftover.Process.Kill(); <-leftoverDone }()

	d1, c1 := startAt(t, state, true)
	c1.Close()
	lost := func(id, handle string) api.Job {
		ckpt := filepath.Join(state, "checkpoints", id)
		if err := os.MkdirAll(ckpt, 0o700); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(ckpt, "ckpt-3"), []byte("x"), 0o600)
		_ = os.WriteFile(filepath.Join(ckpt, "latest.json"), []byte(`{"format":"scavenger.manifest/1","checkpoint":"ckpt-3","step":3,"size":1}`), 0o600)
		dir := filepath.Join(work, id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		j := api.Job{ID: id, Name: id, Command: []string{"/bin/sh", "-c", checkpointingJob}, Dir: dir, Config: plugins.Config{Workers: 1, LRScale: 1},
			Mode: plugins.ModeAuto, CheckpointDir: ckpt, Grace: api.Duration(time.Second), Node: "n1", Launcher: "local",
			State: api.StateRunning, Attempt: 1, Created: time.Now().UTC(), Attempts: []api.Attempt{{Attempt: 1, Started: time.Now().UTC(), Handle: handle}}}
		putRecord(t, d1, j)
		b, _ := json.Marshal(map[string]any{"job": id, "env": []string{"MINE=" + id, "PATH=" + os.Getenv("PATH")}})
		if err := os.MkdirAll(filepath.Join(state, jobs.RestartSubdir), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(state, jobs.RestartSubdir, id+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return j
	}
	gone := lost("gone-000001", "999999999")
	alive := lost("alive-000001", strconv.Itoa(leftover.Process.Pid))
	reused := lost("reused-000001", strconv.Itoa(stranger.Process.Pid))
	other := lost("other-000001", "")
	other.Node = "n2" // another node's job is none of this daemon's business
	putRecord(t, d1, other)
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}

	d2, c2 := startAt(t, state, true)
	defer d2.Close()
	defer c2.Close()
	eventually(t, "the lost job resumed", 10*time.Second, func() bool {
		j, err := c2.Job(ctx, gone.ID)
		return err == nil && j.State == api.StateRunning && j.Attempt == 2
	})
	select {
	case err := <-leftoverDone:
		leftoverDone <- err // for the deferred cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the leftover worker of the lost job still runs")
	}
	for _, id := range []string{alive.ID, reused.ID} {
		eventually(t, "job "+id+" resumed", 10*time.Second, func() bool {
			j, err := c2.Job(ctx, id)
			return err == nil && j.State == api.StateRunning && j.Attempt == 2
		})
	}
	if j, _ := c2.Job(ctx, alive.ID); !strings.Contains(j.Attempts[0].EndReason, "lost") {
		t.Errorf("the lost attempt ended %q", j.Attempts[0].EndReason)
	}
	if err := syscall.Kill(stranger.Process.Pid, 0); err != nil {
		t.Errorf("a program that is no job's worker was killed: %v", err)
	}
	if j, _ := c2.Job(ctx, other.ID); j.State != api.StateRunning {
		t.Errorf("another node's job was touched: %s %q", j.State, j.Message)
	}
	eventually(t, "the resumed job's output", 10*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(work, gone.ID, "attempt-2"))
		return strings.Contains(string(b), "restore="+filepath.Join(gone.CheckpointDir, "ckpt-3")+" mine="+gone.ID)
	})
	// A follower (scavctl run) is told the lost attempt is resumed, and sees
	// no end of the job for it: the job goes on.
	var kinds []string
	if err := c2.Output(ctx, gone.ID, false, func(_ *telemetry.LogLine, e *telemetry.Event) error {
		if e != nil {
			kinds = append(kinds, fmt.Sprintf("%s/%d: %s", e.Kind, e.Attempt, e.Message))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(kinds, "\n")
	if strings.Contains(all, string(telemetry.EventFinished)+"/1") || !strings.Contains(all, string(telemetry.EventRestarting)+"/1") || !strings.Contains(all, "resuming it from its last checkpoint") {
		t.Errorf("events of a lost job that resumed:\n%s\nwant a restarting event for attempt 1 and no end", all)
	}
}

// TestRestartWithoutResumeLeavesJobsStopped: resume_jobs off keeps nothing.
func TestRestartWithoutResumeLeavesJobsStopped(t *testing.T) {
	ctx := context.Background()
	state := testdir.Short(t, "scavd-noresume-")
	j := stoppedWhileRunning(t, state, false)
	if kept, _ := os.ReadDir(filepath.Join(state, jobs.RestartSubdir)); len(kept) > 0 {
		t.Errorf("environments kept without resume_jobs: %v", kept)
	}
	d2, c2 := startAt(t, state, false)
	defer d2.Close()
	defer c2.Close()
	// Start settles the previous daemon's jobs before it returns: a resumed
	// job would be active now.
	if got, err := c2.Job(ctx, j.ID); err != nil || got.State != api.StateStopped || len(d2.Active()) != 0 {
		t.Errorf("job %s %q, active %v, %v", got.State, got.Message, d2.Active(), err)
	}
}

// stoppedWhileRunning starts a daemon on state (resume: resume_jobs), runs
// a checkpointing job on it and stops the daemon once the job runs.
func stoppedWhileRunning(t *testing.T, state string, resume bool) api.Job {
	t.Helper()
	ctx := context.Background()
	d, c := startAt(t, state, resume)
	j, err := c.Run(ctx, api.RunRequest{Command: []string{"/bin/sh", "-c", checkpointingJob}, Dir: t.TempDir(),
		Config: plugins.Config{Workers: 1}, Grace: api.Duration(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the job running", 10*time.Second, func() bool {
		j, err := c.Job(ctx, j.ID)
		return err == nil && j.State == api.StateRunning
	})
	c.Close()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	return j
}

// putRecord writes j into the job bucket as a daemon before this one left it.
func putRecord(t *testing.T, d *Daemon, j api.Job) {
	t.Helper()
	b, _ := json.Marshal(j)
	if _, err := d.store.Jobs.Put(context.Background(), j.ID, b); err != nil {
		t.Fatal(err)
	}
}

// TestHandedOverJobNotResumedEnds: a daemon that stops hands its job to the
// next one (its end says so, and followers wait on); the next one, without
// resume_jobs, does not resume it and publishes the job's end, so that the
// followers end too.
func TestHandedOverJobNotResumedEnds(t *testing.T) {
	ctx := context.Background()
	state := testdir.Short(t, "scavd-handover-")
	j := stoppedWhileRunning(t, state, true)
	d2, c2 := startAt(t, state, false)
	defer d2.Close()
	defer c2.Close()
	var ends []telemetry.Event
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = c2.Output(octx, j.ID, true, func(_ *telemetry.LogLine, e *telemetry.Event) error {
		if e != nil && e.Kind == telemetry.EventFinished {
			if ends = append(ends, *e); !e.Handover {
				return errors.New("ended")
			}
		}
		return nil
	})
	if len(ends) != 2 || !ends[0].Handover || ends[1].Handover || ends[1].State != string(api.StateStopped) ||
		!strings.Contains(ends[1].Message, "did not resume it (resume_jobs is off)") || strings.Contains(ends[1].Message, "resumes it") {
		t.Fatalf("ends of the job: %+v; want the handover, then the next scavd's end without it", ends)
	}
}
