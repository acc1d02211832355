package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/syncbuf"
	"github.com/scavenger-ml/scavenger/internal/testproc"
)

// followScript is a job of one /bin/sh worker that resumes as a real one
// does: its first attempt writes a checkpoint (manifest and file) and waits
// for a stop; later attempts, started from it, wait for the file "finish" in
// the working directory and end well, or are stopped too.
const followScript = `echo "attempt $SCAV_ATTEMPT up (restore ${SCAV_RESTORE:-none})"
if [ -z "$SCAV_RESTORE" ]; then
  printf x > "$SCAV_CHECKPOINT_DIR/ckpt-5"
  printf '{"format":"scavenger.manifest/1","checkpoint":"ckpt-5","step":5,"size":1}' > "$SCAV_CHECKPOINT_DIR/latest.json"
  echo "attempt $SCAV_ATTEMPT checkpointed"
fi
trap 'echo "attempt $SCAV_ATTEMPT stopping"; exit 0' TERM
while [ ! -e finish ]; do sleep 0.1 & wait; done
echo "attempt $SCAV_ATTEMPT done"`

// startOwnScavd starts scavd on state as a node's service runs (it resumes
// what it stopped at its next start) and returns it with its log.
func startOwnScavd(t *testing.T, state, name string) (*exec.Cmd, *syncbuf.Buffer) {
	t.Helper()
	d := exec.Command(scavdBinary(t), "--state-dir", state, "--listen", "127.0.0.1:0", "--node", "e2e-node", "--log-level", "warn")
	d.Dir = repoRoot
	log := startDaemon(t, d, name)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if info, err := api.ReadDiscovery(state); err == nil && info.PID == d.Process.Pid {
			return d, log
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s wrote no discovery file within 30s", name)
		}
	}
}

// awaitJob polls the job's record until ok says it is there.
func awaitJob(t *testing.T, state, id, what string, ok func(api.Job) bool) api.Job {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if j := jobRecord(t, state, id); ok(j) {
			return j
		} else if time.Now().After(deadline) {
			t.Fatalf("job %s: %s not reached within 30s: %s attempt %d %q", id, what, j.State, j.Attempt, j.Message)
		}
	}
}

// follower is scavctl attach or logs -f running in the background.
type follower struct {
	cmd      *exec.Cmd
	out, err bytes.Buffer
}

func startFollower(t *testing.T, state string, args ...string) *follower {
	t.Helper()
	f := &follower{cmd: exec.Command(scavctlBin, append([]string{"--state-dir", state}, args...)...)}
	f.cmd.Dir = repoRoot
	f.cmd.Stdout, f.cmd.Stderr = &f.out, &f.err
	testproc.Start(t, f.cmd)
	return f
}

// wait waits for the follower to end (within a minute) and returns its exit code.
func (f *follower) wait(t *testing.T) int {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = f.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = f.cmd.Process.Kill()
		<-done
		t.Fatalf("scavctl %v did not end within a minute of the job's end:\n%s%s", f.cmd.Args[1:], f.out.String(), f.err.String())
	}
	return f.cmd.ProcessState.ExitCode()
}

// TestAttachAndLogsFollowAcrossStopsResumesAndRestarts follows one job
// through a stop, a resume and a restart of its scavd (which hands the job
// to the next one, which resumes it): attach and logs -f, started after the
// first stop (they replay it) and before the restart (they live through it),
// end with the job's final end, print every line of every attempt, and
// attach exits as the job did (0). Started after the end, they replay it all.
func TestAttachAndLogsFollowAcrossStopsResumesAndRestarts(t *testing.T) {
	state, work := stateDir(t), t.TempDir()
	first, _ := startOwnScavd(t, state, "first scavd")
	submit := exec.Command(scavctlBin, "--state-dir", state, "run", "-d", "--name", "follow", "--grace", "5s", "--", "/bin/sh", "-c", followScript)
	submit.Dir = work // the job's working directory, where "finish" appears
	out, err := submit.Output()
	if err != nil {
		t.Fatalf("run -d: %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(out))
	awaitJob(t, state, id, "a checkpoint", func(j api.Job) bool {
		_, err := os.Stat(filepath.Join(j.CheckpointDir, "latest.json"))
		return err == nil
	})
	if out, errOut, code := scavctl(t, state, "stop", id); code != 0 {
		t.Fatalf("stop: exit %d\n%s%s", code, out, errOut)
	}
	awaitJob(t, state, id, "stopped", func(j api.Job) bool { return j.State == api.StateStopped })
	if out, errOut, code := scavctl(t, state, "run", "-d", "--resume", id); code != 0 {
		t.Fatalf("run -d --resume: exit %d\n%s%s", code, out, errOut)
	}
	awaitJob(t, state, id, "attempt 2 running", func(j api.Job) bool { return j.Attempt == 2 && j.State == api.StateRunning })

	attach := startFollower(t, state, "attach", id)
	logs := startFollower(t, state, "logs", "-f", id)
	time.Sleep(time.Second) // both replayed the first stop and follow attempt 2

	// A restart of scavd (SIGTERM, as systemctl restart sends): the job is
	// handed over, and the next scavd resumes it as attempt 3.
	_ = first.Process.Signal(syscall.SIGTERM)
	if err := first.Wait(); err != nil {
		t.Fatalf("first scavd: %v", err)
	}
	startOwnScavd(t, state, "second scavd")
	awaitJob(t, state, id, "attempt 3 running", func(j api.Job) bool { return j.Attempt == 3 && j.State == api.StateRunning })
	if err := os.WriteFile(filepath.Join(work, "finish"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	awaitJob(t, state, id, "succeeded", func(j api.Job) bool { return j.State == api.StateSucceeded })

	want := []string{
		"[0] attempt 1 up (restore none)", "[0] attempt 1 checkpointed", "[0] attempt 1 stopping",
		"[0] attempt 2 up (restore " + jobRecord(t, state, id).CheckpointDir + "/ckpt-5)", "[0] attempt 2 stopping",
		"[0] attempt 3 up (restore " + jobRecord(t, state, id).CheckpointDir + "/ckpt-5)", "[0] attempt 3 done",
	}
	plain, _, _ := scavctl(t, state, "logs", id)
	if got := lines(plain); !slices.Equal(got, want) {
		t.Fatalf("logs = %q, want %q", got, want)
	}
	if code := attach.wait(t); code != 0 || !slices.Equal(lines(attach.out.String()), want) || !strings.Contains(attach.err.String(), "job "+id+" finished: ") {
		t.Errorf("attach started after the stop: exit %d, stdout %q, stderr:\n%s\nwant exit 0, %q and the job's end", code, lines(attach.out.String()), attach.err.String(), want)
	}
	if code := logs.wait(t); code != 0 || !slices.Equal(lines(logs.out.String()), want) {
		t.Errorf("logs -f started after the stop: exit %d, stdout %q, stderr:\n%s\nwant exit 0 and %q", code, lines(logs.out.String()), logs.err.String(), want)
	}
	for _, args := range [][]string{{"attach", id}, {"logs", "-f", id}} {
		f := startFollower(t, state, args...)
		if code := f.wait(t); code != 0 || !slices.Equal(lines(f.out.String()), want) {
			t.Errorf("scavctl %v after the end: exit %d, stdout %q, stderr:\n%s\nwant exit 0 and %q", args, code, lines(f.out.String()), f.err.String(), want)
		}
	}
}

// lines splits output into its non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
