package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
)

// The trials of a worker's faults (issue 21): a hung rank, a checkpoint
// directory that turns read-only for a while, an out-of-memory kill, and a
// worker's child that leaves its session.

// workersWith runs the fault worker on 2 ranks (total steps, every 40 a
// meet and a checkpoint) with env and faults, its checkpoints in ckpt when
// set, and returns the job.
func workersWith(t *testing.T, c *api.Client, python, side string, total int, env []string, faults api.Faults, ckpt string) api.Job {
	t.Helper()
	j, err := c.Run(context.Background(), api.RunRequest{
		Command: []string{python, "-c", faultWorker, strconv.Itoa(total), "40", "0", side}, Dir: side, CheckpointDir: ckpt,
		Env: env, Config: plugins.Config{Workers: 2}, Grace: api.Duration(5 * time.Second), Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// ended follows job j to its end and settles the trial's counts; ok is
// whether it succeeded.
func ended(t *testing.T, c *api.Client, j api.Job, total int, r *trialResult) api.Job {
	t.Helper()
	final := follow(t, c, j.ID, 5*time.Minute)
	j, err := c.Job(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	r.ok = r.ok && final.ExitCode != nil && *final.ExitCode == 0 && j.State == api.StateSucceeded
	settle(t, c, j, total, r)
	return j
}

// stallTrial stops rank 1 with SIGSTOP after the first checkpoint: with
// --stall-timeout 3s and --on-stall restart the daemon marks the job
// stalled, ends the attempt (the stopped rank too) and restarts it from its
// checkpoint; it must finish. The figure is the time from the hang to the
// restarted attempt's start.
func stallTrial(t *testing.T, python string) trialResult {
	const total = 300
	_, c := faultDaemon(t, Config{StateDir: t.TempDir()})
	side := t.TempDir()
	j := workersWith(t, c, python, side, total, nil, api.Faults{StallTimeout: api.Duration(3 * time.Second), OnStall: api.StallRestart}, "")
	pid := workerPid(t, side, 1, 1)
	waitFor(t, time.Minute, "the first checkpoint", func() bool {
		_, err := os.Stat(filepath.Join(j.CheckpointDir, "latest.json"))
		return err == nil
	})
	hung := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var restarted time.Time
	waitFor(t, 2*time.Minute, "the restarted attempt", func() bool {
		got, err := c.Job(context.Background(), j.ID)
		if err == nil && len(got.Attempts) >= 2 {
			restarted = got.Attempts[1].Started
			return true
		}
		return false
	})
	r := endedSaying(t, c, j, total, "(stalled)")
	r.figure = restarted.Sub(hung).Seconds()
	return r
}

// endedSaying follows job j to its end, settles the trial's counts, and
// requires that its first attempt ended saying want.
func endedSaying(t *testing.T, c *api.Client, j api.Job, total int, want string) trialResult {
	t.Helper()
	r := trialResult{ok: true}
	j = ended(t, c, j, total, &r)
	if why := j.Attempts[0].EndReason; !strings.Contains(why, want) {
		r.ok, r.note = false, "attempt 1 ended: "+why
	}
	return r
}

// readOnlyCheckpointTrial remounts the job's checkpoint directory read-only
// for 25 s after its first checkpoint: rank 0's next checkpoint fails, and
// the job crashes on each attempt until it is writable again; the restarts'
// back-off must outlast the 25 s. The figure is the job's attempts.
func readOnlyCheckpointTrial(t *testing.T, python string) trialResult {
	const total = 400
	disk := smallDisk(t, 32<<20)
	_, c := faultDaemon(t, Config{StateDir: t.TempDir()})
	side := t.TempDir()
	j := workersWith(t, c, python, side, total, nil, api.Faults{}, filepath.Join(disk, "ckpt"))
	waitFor(t, time.Minute, "the first checkpoint", func() bool {
		_, err := os.Stat(filepath.Join(disk, "ckpt", "latest.json"))
		return err == nil
	})
	remount := func(flags uintptr) {
		if err := syscall.Mount("tmpfs", disk, "tmpfs", syscall.MS_REMOUNT|flags, "size="+strconv.Itoa(32<<20)); err != nil {
			t.Fatalf("remount: %v", err)
		}
	}
	remount(syscall.MS_RDONLY)
	time.Sleep(25 * time.Second)
	remount(0)
	r := trialResult{ok: true}
	j = ended(t, c, j, total, &r)
	r.figure = float64(len(j.Attempts))
	if !r.ok {
		r.note = fmt.Sprintf("%s after %d attempts: %s", j.State, len(j.Attempts), j.Message)
	}
	return r
}

// oomTrial runs the job in a memory cgroup of 200 MB; at step 100 of its
// first attempt rank 1 takes 300 MB, and the kernel's out-of-memory killer
// ends it. The job must restart from its checkpoint, the first attempt's
// end naming the out-of-memory kill, and finish.
func oomTrial(t *testing.T, python string) trialResult {
	const total = 300
	if os.Geteuid() != 0 {
		t.Skip("a memory cgroup needs root")
	}
	mem := filepath.Join("/sys/fs/cgroup/memory", fmt.Sprintf("scavtest-oom-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(mem, 0o755); err != nil {
		t.Skipf("no memory cgroup (v1): %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(mem) })
	if err := os.WriteFile(filepath.Join(mem, "memory.limit_in_bytes"), []byte("200M"), 0); err != nil {
		t.Fatal(err)
	}
	_, c := faultDaemon(t, Config{StateDir: t.TempDir()})
	side := t.TempDir()
	// The ranks join the memory cgroup through a shell that then becomes the worker.
	j, err := c.Run(context.Background(), api.RunRequest{
		Command: []string{"/bin/sh", "-c", `echo $$ > "$MEMCG/cgroup.procs" && exec "$@"`, "sh", python, "-c", faultWorker, strconv.Itoa(total), "40", "0", side},
		Dir:     side, Env: []string{"OOM_AT=100", "MEMCG=" + mem, "PATH=" + os.Getenv("PATH")}, Config: plugins.Config{Workers: 2}, Grace: api.Duration(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	return endedSaying(t, c, j, total, "out-of-memory killer")
}

// setsidTrial runs the job whose rank 0 starts a child in a session of
// its own (it leaves the attempt's process group): it must end with the
// job, and leave no zombie.
func setsidTrial(t *testing.T, python string) trialResult {
	const total = 120
	_, c := faultDaemon(t, Config{StateDir: t.TempDir()})
	side := t.TempDir()
	j := workersWith(t, c, python, side, total, []string{"SETSID=1"}, api.Faults{}, "")
	r := trialResult{ok: true}
	ended(t, c, j, total, &r)
	// The orphan is reaped by the daemon's reaper within a second of its end.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if r.procs, r.zombies, _ = leftovers(j); r.procs == 0 && r.zombies == 0 {
			break
		}
	}
	return r
}
