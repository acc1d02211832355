package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testuser"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// The attacks of issue 20 on the files a root daemon touches in a user's
// checkpoint directory, tried by a real unprivileged user (made and removed
// by each test): the daemon may do there only what the user could.

// userJob is a job of u's whose checkpoint directory (made, u's, mode 0700)
// is in a directory every user can enter.
func userJob(t *testing.T, u testuser.User, id string) api.Job {
	t.Helper()
	dir := filepath.Join(testuser.SharedDir(t), id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, u.UID, u.GID); err != nil {
		t.Fatal(err)
	}
	return api.Job{ID: id, CheckpointDir: dir, Owner: &api.Owner{UID: uint32(u.UID), GID: uint32(u.GID), User: u.Name}}
}

// victimDir is a directory of owner's (0700) holding names, each a file
// with a step record of job in it.
func victimDir(t *testing.T, owner testuser.User, job string, names ...string) string {
	t.Helper()
	dir := filepath.Join(testuser.SharedDir(t), "victim")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(stepLine(job, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(dir, owner.UID, owner.GID); err != nil {
		t.Fatal(err)
	}
	return dir
}

// stepLine is a step record of job, with its newline.
func stepLine(job string, step int64) string {
	b, _ := json.Marshal(telemetry.StepRecord{V: telemetry.SchemaVersion, Job: job, Attempt: 1, World: 1, Step: step, Time: 1.7e9})
	return string(b) + "\n"
}

// spoolRegistry is the part of a registry a spool drain uses, over an
// embedded NATS; published collects the steps it publishes for job.
func spoolRegistry(t *testing.T, job string) (g *Registry, published func() []int64) {
	t.Helper()
	nc, _ := store(t)
	log := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))
	g = &Registry{o: Options{NC: nc}, log: log}
	g.js, _ = jetstream.New(nc)
	var mu sync.Mutex
	var got []int64
	sub, err := nc.Subscribe(telemetry.StepSubject(job), func(m *nats.Msg) {
		recs, _ := telemetry.DecodeBatch(m.Data)
		mu.Lock()
		defer mu.Unlock()
		for _, r := range recs {
			got = append(got, r.Step)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return g, func() []int64 {
		_ = nc.Flush()
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		return append([]int64(nil), got...)
	}
}

// names lists dir (as root), sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestSpoolSymlinkIsNotFollowed: a worker replaces its spool directory by a
// symlink to a root-only directory, or to another user's; draining the
// spool deletes, renames and reads nothing there.
func TestSpoolSymlinkIsNotFollowed(t *testing.T) {
	mallory, bob := testuser.Add(t, "m"), testuser.Add(t, "b")
	files := []string{"a.jsonl", "b.jsonl.tmp", "c.jsonl" + sendingSuffix, "d.jsonl" + drainingSuffix}
	for _, victim := range []testuser.User{testuser.Root, bob} {
		job := userJob(t, mallory, "spoolln-000001")
		g, published := spoolRegistry(t, job.ID)
		target := victimDir(t, victim, job.ID, files...)
		mallory.Do(t, func() {
			if err := os.Symlink(target, filepath.Join(job.CheckpointDir, spoolDir)); err != nil {
				t.Error(err)
			}
		})
		g.drainSpool(context.Background(), job, true)
		if got := names(t, target); strings.Join(got, " ") != strings.Join(files, " ") {
			t.Errorf("%s's directory behind mallory's spool symlink holds %v after a drain; want %v untouched", victim.Name, got, files)
		}
		if p := published(); len(p) > 0 {
			t.Errorf("records read through the symlink to %s's directory were published: %v", victim.Name, p)
		}
	}
}

// TestCheckpointDirSwappedForASymlink: the checkpoint directory itself is
// replaced, mid-job, by a symlink to a root-only directory: the spool and
// the writers' temporary files are looked for in the directory the user
// made, never behind the link.
func TestCheckpointDirSwappedForASymlink(t *testing.T) {
	mallory := testuser.Add(t, "m")
	job := userJob(t, mallory, "ckptln-000001")
	g, _ := spoolRegistry(t, job.ID)
	target := victimDir(t, testuser.Root, job.ID, ".model.123.scavtmp", ".opt.9.scavtmp")
	if err := os.Mkdir(filepath.Join(target, spoolDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, spoolDir, "a.jsonl"), []byte(stepLine(job.ID, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	mallory.Do(t, func() {
		if err := os.Remove(job.CheckpointDir); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(target, job.CheckpointDir); err != nil {
			t.Error(err)
		}
	})
	if n := removeTemporaries(job); n != 0 {
		t.Errorf("removed %d files behind the symlink", n)
	}
	g.drainSpool(context.Background(), job, true)
	want := []string{".model.123.scavtmp", ".opt.9.scavtmp", spoolDir}
	if got := names(t, target); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("root's directory holds %v; want %v", got, want)
	}
	if got := names(t, filepath.Join(target, spoolDir)); len(got) != 1 || got[0] != "a.jsonl" {
		t.Errorf("root's spool-like directory holds %v; want a.jsonl untouched", got)
	}
}

// TestSpoolFIFOAndSparseFile: a FIFO named like a spool file does not hang
// the drain, and a sparse file of 1 GiB (no disk used) is not read into
// memory; the real spool file next to them is published, and the drain
// leaves nothing of them behind.
func TestSpoolFIFOAndSparseFile(t *testing.T) {
	mallory := testuser.Add(t, "m")
	job := userJob(t, mallory, "spoolfifo-000001")
	g, published := spoolRegistry(t, job.ID)
	spool := filepath.Join(job.CheckpointDir, spoolDir)
	mallory.Do(t, func() {
		if err := os.Mkdir(spool, 0o700); err != nil {
			t.Error(err)
			return
		}
		if err := unix.Mkfifo(filepath.Join(spool, "b.jsonl"), 0o600); err != nil {
			t.Error(err)
		}
		f, err := os.Create(filepath.Join(spool, "c.jsonl"))
		if err == nil {
			err = f.Truncate(1 << 30)
			f.Close()
		}
		if err != nil {
			t.Error(err)
		}
		if err := os.WriteFile(filepath.Join(spool, "a.jsonl"), []byte(stepLine(job.ID, 7)), 0o600); err != nil {
			t.Error(err)
		}
	})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.drainSpool(context.Background(), job, true)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Error("the drain hangs on the FIFO")
		// Let it go: a writer opens the FIFO's other end.
		if w, err := os.OpenFile(filepath.Join(spool, "b.jsonl"+drainingSuffix), os.O_WRONLY, 0); err == nil {
			w.Close()
		} else if w, err := os.OpenFile(filepath.Join(spool, "b.jsonl"), os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		<-done
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("the drain allocated %d MiB: it read the sparse file", grew>>20)
	}
	if p := published(); len(p) != 1 || p[0] != 7 {
		t.Errorf("published %v; want the real spool file's step 7", p)
	}
	if _, err := os.Lstat(spool); !os.IsNotExist(err) {
		t.Errorf("the spool is left with %v", names(t, spool))
	}
}

// TestManifestIsReadAsItsOwner: a manifest naming a symlink to a root-only
// file is refused whether or not its recorded size is the file's, and the
// refusal does not tell the size; a real checkpoint is found.
func TestManifestIsReadAsItsOwner(t *testing.T) {
	mallory := testuser.Add(t, "m")
	job := userJob(t, mallory, "manifest-000001")
	secretDir := victimDir(t, testuser.Root, job.ID)
	secret := filepath.Join(secretDir, "secret")
	if err := os.WriteFile(secret, make([]byte, 12345), 0o600); err != nil {
		t.Fatal(err)
	}
	manifest := func(name string, size int) {
		mallory.Do(t, func() {
			b := fmt.Sprintf(`{"format": %q, "checkpoint": %q, "step": 5, "size": %d}`, manifestFormat, name, size)
			if err := os.WriteFile(filepath.Join(job.CheckpointDir, manifestFile), []byte(b), 0o600); err != nil {
				t.Error(err)
			}
		})
	}
	mallory.Do(t, func() {
		if err := os.Symlink(secret, filepath.Join(job.CheckpointDir, "ck")); err != nil {
			t.Error(err)
		}
	})
	var refusals []string
	for _, size := range []int{12345, 999} {
		manifest("ck", size)
		_, err := readManifest(job)
		if err == nil {
			t.Errorf("a manifest naming a symlink to root's file (size %d) was accepted", size)
			continue
		}
		if strings.Contains(err.Error(), "12345") {
			t.Errorf("the refusal tells the size of root's file: %v", err)
		}
		refusals = append(refusals, err.Error())
	}
	if len(refusals) == 2 && refusals[0] != refusals[1] {
		t.Errorf("the refusals differ with the recorded size:\n%s\n%s", refusals[0], refusals[1])
	}
	mallory.Do(t, func() {
		if err := os.WriteFile(filepath.Join(job.CheckpointDir, "ckpt-5.pt"), make([]byte, 10), 0o600); err != nil {
			t.Error(err)
		}
	})
	manifest("ckpt-5.pt", 10)
	if m, err := readManifest(job); err != nil || m.step != 5 || m.path != filepath.Join(job.CheckpointDir, "ckpt-5.pt") {
		t.Errorf("a real checkpoint: %+v, %v", m, err)
	}
}

// TestCheckpointDirRefusalsAreWordedAlike: naming a checkpoint directory
// that is a root-only file, a missing path, or one of the user's own
// directories that the user cannot reach gets one refusal, worded the same:
// the daemon tells no more of root's files than the user could see.
func TestCheckpointDirRefusalsAreWordedAlike(t *testing.T) {
	mallory := testuser.Add(t, "m")
	private := victimDir(t, testuser.Root, "x", "file")
	hidden := filepath.Join(private, "hers")
	if err := os.Mkdir(hidden, 0o700); err != nil || os.Chown(hidden, mallory.UID, mallory.GID) != nil {
		t.Fatal("make mallory's unreachable directory")
	}
	g := &Registry{log: zaptest.NewLogger(t)}
	var got []string
	for _, p := range []string{filepath.Join(private, "file"), filepath.Join(private, "missing"), hidden} {
		j := api.Job{ID: "ckdir-000001", CheckpointDir: p, Owner: &api.Owner{UID: uint32(mallory.UID), GID: uint32(mallory.GID), User: mallory.Name}}
		err := g.checkpointDir(j, true)
		if err == nil {
			t.Errorf("checkpoint directory %s accepted", p)
			continue
		}
		got = append(got, strings.ReplaceAll(err.Error(), p, "PATH"))
	}
	for _, s := range got[1:] {
		if s != got[0] {
			t.Errorf("refusals differ:\n%s\n%s", got[0], s)
		}
	}
}
