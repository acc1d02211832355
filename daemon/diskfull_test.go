package daemon

import (
	"context"
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
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// smallDisk mounts a tmpfs of size bytes for the test (root only) and
// unmounts it at the end.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir, err := os.MkdirTemp("", "scavd-disk-")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		os.Remove(dir)
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
		os.Remove(dir)
	})
	return dir
}

// fill leaves about free bytes free on the file system of dir and returns
// the file that takes the rest.
func fill(t *testing.T, dir string, free int64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "fill")
	n := int64(st.Bavail)*st.Bsize - free
	if out, err := exec.Command("fallocate", "-l", strconv.FormatInt(n, 10), path).CombinedOutput(); err != nil {
		t.Fatalf("fallocate: %v: %s", err, out)
	}
	return path
}

func TestJudgeDisk(t *testing.T) {
	for _, c := range []struct {
		name          string
		in            diskState
		full, restart bool
		reason        string
	}{
		{"plenty", diskState{Free: 1 << 30}, false, false, ""},
		{"a small disk's marks are its 5% and 10%", diskState{Free: 4 << 20, Total: 64 << 20}, false, false, ""},
		{"a small disk, full", diskState{Free: 3 << 20, Total: 64 << 20}, true, false, "almost full (3.0 MiB free)"},
		{"a small disk, room again", diskState{Free: 7 << 20, Total: 64 << 20, Fault: true}, false, true, "restarting"},
		{"unknown", diskState{Free: -1}, false, false, ""},
		{"almost full", diskState{Free: 10 << 20}, true, false, "almost full (10.0 MiB free)"},
		{"between the marks, was fine", diskState{Free: 40 << 20}, false, false, ""},
		{"between the marks, was full", diskState{Free: 40 << 20, Full: true}, true, false, "almost full"},
		{"a write failed", diskState{Free: 3 << 20, Fault: true}, true, false, "the store cannot write; jobs keep running"},
		{"a write failed, room again", diskState{Free: 100 << 20, Fault: true, Full: true}, false, true, "room again (100.0 MiB free): restarting the store"},
		{"JetStream disabled itself", diskState{Free: 1 << 20, Disabled: true}, true, false, "full"},
		{"disabled, room again", diskState{Free: 1 << 30, Disabled: true}, false, true, "restarting"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := judgeDisk(c.in)
			if v.Full != c.full || v.Restart != c.restart || !strings.Contains(v.Reason, c.reason) || (c.reason == "") != (v.Reason == "") {
				t.Errorf("judgeDisk(%+v) = %+v; want full %v restart %v, reason with %q", c.in, v, c.full, c.restart, c.reason)
			}
		})
	}
}

// stepper reports a step every 10 ms while the file hold is there, then 100
// more, and writes how many it reported to count.
const stepper = `import os, sys, time, scavenger
hold, count = sys.argv[1], sys.argv[2]
n = 0
while os.path.exists(hold) or n < 100:
    n += 1
    scavenger.step(samples=1)
    time.sleep(0.01)
for _ in range(100):
    n += 1
    scavenger.step(samples=1)
st = scavenger.stats()
scavenger.close()
open(count, "w").write(str(n))
open(count + ".stats", "w").write(repr((st, scavenger.stats())))
`

// TestStateDiskFullThenFreed fills the state disk (a small tmpfs) under a
// running job, a job that reports steps and a job that floods its output:
// the daemon reports it (naming the state directory and the checkpoint
// directory, with the space left), the jobs go on, nothing hangs, and once
// the space is freed the store writes again without a restart of the
// daemon: the ends are recorded, every step record is there once, and a
// new job runs and is followed to its end.
func TestStateDiskFullThenFreed(t *testing.T) {
	python := testPython()
	disk, side := smallDisk(t, 64<<20), t.TempDir()
	ctx := context.Background()
	state := filepath.Join(disk, "state")
	d, err := Start(ctx, Config{StateDir: state, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", OutputReadPerUser: -1,
		Retention: history.Retention{StepMaxBytes: 8 << 20, LogMaxBytes: 8 << 20, NodeMaxBytes: 1 << 20}}, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := api.Dial(ctx, d.APISocket(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	submit := func(cmd ...string) api.Job {
		t.Helper()
		j, err := c.Run(ctx, api.RunRequest{Command: cmd, Dir: side, Config: plugins.Config{Workers: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	hold, count := filepath.Join(side, "hold"), filepath.Join(side, "count")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	long := submit("/bin/sh", "-c", "while [ -e "+hold+" ]; do echo tick; sleep 0.1; done")
	steps := submit(python, "-c", stepper, hold, count)
	f := fill(t, disk, 3<<20)
	flood := submit("/bin/sh", "-c", "for i in $(seq 100000); do echo line $i of a flood of output that fills what is left; done")
	// Full means a write was refused (the store holds), not only that the
	// watch saw little space left: until then nothing has failed, and
	// freeing the space would test no recovery.
	waitFor(t, 60*time.Second, "the daemon to report the full state disk and the checkpoint directory, and the store to refuse a write", func() bool {
		info := d.info()
		return info.StateDisk != "" && len(info.CheckpointDisks) > 0 && d.disk.holding()
	})
	info := d.info()
	if !strings.Contains(info.StateDisk, state) || !strings.Contains(info.StateDisk, "MiB free") {
		t.Errorf("state disk reported as %q, want its directory and the space left", info.StateDisk)
	}
	if !strings.Contains(strings.Join(info.CheckpointDisks, "\n"), long.CheckpointDir) {
		t.Errorf("checkpoint disks reported as %q, want %s", info.CheckpointDisks, long.CheckpointDir)
	}
	if full, _, _ := d.disk.gauges(); full != 1 {
		t.Errorf("scavenger_state_disk_full = %v while full", full)
	}
	t.Logf("reported: %s; %s", info.StateDisk, info.CheckpointDisks)
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the daemon to recover", func() bool { return d.info().StateDisk == "" })
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	for _, j := range []api.Job{long, steps, flood} {
		final := follow(t, c, j.ID, 60*time.Second)
		if final.ExitCode == nil || *final.ExitCode != 0 {
			t.Errorf("job %s ended %+v, want exit 0", j.ID, final)
		}
	}
	checkSteps(t, c, steps.ID, count)
	after := submit("/bin/echo", "after")
	if final := follow(t, c, after.ID, 60*time.Second); final.ExitCode == nil || *final.ExitCode != 0 {
		t.Errorf("a job after the recovery ended %+v", final)
	}
	if _, _, restarts := d.disk.gauges(); restarts < 1 {
		t.Errorf("store restarts %v, want at least 1", restarts)
	}
}

// checkSteps checks that job id's step records are the ones its worker
// said (in the file count) it reported, each once. Records the daemon held
// while the store could not write may be stored after the job's end: it
// waits (a minute at most) for as many as the worker reported.
func checkSteps(t *testing.T, c *api.Client, id, count string) {
	t.Helper()
	b, err := os.ReadFile(count)
	if err != nil {
		t.Fatalf("the stepping job's count: %v", err)
	}
	want, _ := strconv.Atoi(string(b))
	var seen map[int64]int
	read := func() bool {
		seen = map[int64]int{}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Steps(ctx, id, false, func(r telemetry.StepRecord) error { seen[r.Step]++; return nil }); err != nil {
			t.Fatal(err)
		}
		return len(seen) >= want
	}
	for deadline := time.Now().Add(time.Minute); !read() && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
	}
	st, _ := os.ReadFile(count + ".stats")
	t.Logf("the worker's client: %s (before and after its close)", st)
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	if len(seen) != want || dups != 0 {
		var missing []string
		for i := int64(1); i <= int64(want); i++ {
			if seen[i] == 0 {
				j := i
				for j < int64(want) && seen[j+1] == 0 {
					j++
				}
				missing = append(missing, fmt.Sprintf("%d-%d", i, j))
				i = j
			}
		}
		t.Errorf("step records: %d distinct, %d duplicated; the worker reported %d; missing steps %s", len(seen), dups, want, strings.Join(missing, " "))
	}
}

// waitFor polls cond until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
	}
}

// follow follows job id's output to its final event, failing the test
// when it does not come within limit.
func follow(t *testing.T, c *api.Client, id string, limit time.Duration) telemetry.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var final telemetry.Event
	errDone := errors.New("done")
	err := c.Output(ctx, id, true, func(l *telemetry.LogLine, e *telemetry.Event) error {
		if e != nil && e.Kind == telemetry.EventFinished {
			final = *e
			return errDone
		}
		return nil
	})
	if !errors.Is(err, errDone) {
		t.Fatalf("follow job %s: %v (no final event within %s)", id, err, limit)
	}
	return final
}

// TestReadOnlyCheckpointDirIsReported (issue 21): a running job's checkpoint
// directory on a file system remounted read-only is reported in status
// until it is writable again.
func TestReadOnlyCheckpointDirIsReported(t *testing.T) {
	disk := smallDisk(t, 16<<20)
	_, c := faultDaemon(t, Config{StateDir: t.TempDir()})
	ctx := context.Background()
	j, err := c.Run(ctx, api.RunRequest{Command: []string{"/bin/sh", "-c", "sleep 60"}, Dir: t.TempDir(), CheckpointDir: filepath.Join(disk, "ckpt"),
		Config: plugins.Config{Workers: 1}, Grace: api.Duration(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = c.Stop(ctx, j.ID, 0) }()
	remount := func(mode string) {
		if err := syscall.Mount("tmpfs", disk, "tmpfs", syscall.MS_REMOUNT|map[string]uintptr{"ro": syscall.MS_RDONLY, "rw": 0}[mode], "size=16777216"); err != nil {
			t.Fatalf("remount %s: %v", mode, err)
		}
	}
	remount("ro")
	defer remount("rw")
	waitFor(t, 30*time.Second, "status to report the read-only checkpoint directory", func() bool {
		info, err := c.Ping(ctx)
		return err == nil && strings.Contains(strings.Join(info.CheckpointDisks, "\n"), "read-only")
	})
	remount("rw")
	waitFor(t, 30*time.Second, "the report to clear", func() bool {
		info, err := c.Ping(ctx)
		return err == nil && len(info.CheckpointDisks) == 0
	})
}
