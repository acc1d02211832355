package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testuser"
	"github.com/scavenger-ml/scavenger/plugins"
)

// runAs runs script as u's job on d, in dir, with env, and waits for its end.
func runAs(t *testing.T, d *Daemon, u testuser.User, dir string, env []string, argv ...string) api.Job {
	t.Helper()
	owner := api.Owner{UID: uint32(u.UID), GID: uint32(u.GID), User: u.Name, Home: dir}
	j, err := d.jobs.Submit(t.Context(), api.RunRequest{Command: argv, Dir: dir, Env: env, Config: plugins.Config{Workers: 1}}, owner)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, err := d.jobs.Get(t.Context(), j.ID)
		if err == nil && got.State.Done() {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s did not end: %v", j.ID, err)
		}
	}
}

// TestWorkersStartAsTheirOwner: issue 20's smaller attacks on how a root
// daemon starts another user's worker. A file descriptor scavd inherited
// (open on a root-only file, not close-on-exec) is not the worker's; and the
// command's name is looked up in the worker's PATH as its owner, not in
// the daemon's (whose first directory, root-only, holds a program of that
// name the user could not run).
func TestWorkersStartAsTheirOwner(t *testing.T) {
	mallory := testuser.Add(t, "m")
	shared := testuser.SharedDir(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(secret, unix.O_RDONLY, 0) // no O_CLOEXEC: as a parent leaves one
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	rootOnly, public := filepath.Join(shared, "rootonly"), filepath.Join(shared, "public")
	for dir, mode := range map[string]os.FileMode{rootOnly: 0o700, public: 0o755} {
		if err := os.Mkdir(dir, mode); err != nil || os.Chmod(dir, mode) != nil {
			t.Fatal(err)
		}
		script := fmt.Sprintf("#!/bin/sh\necho %s > %s/ran\nls -l /proc/self/fd/ > %s/fds\n", filepath.Base(dir), shared, shared)
		if err := os.WriteFile(filepath.Join(dir, "scvtool"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", rootOnly+":"+os.Getenv("PATH"))
	d, _ := startDaemon(t)
	j := runAs(t, d, mallory, shared, []string{"PATH=" + public + ":/usr/bin:/bin"}, "scvtool")
	ran, _ := os.ReadFile(filepath.Join(shared, "ran"))
	if j.State != api.StateSucceeded || strings.TrimSpace(string(ran)) != "public" {
		t.Errorf("mallory's scvtool: %s %q, ran %q; want hers (public) run", j.State, j.Message, ran)
	}
	fds, _ := os.ReadFile(filepath.Join(shared, "fds"))
	if strings.Contains(string(fds), secret) {
		t.Errorf("mallory's worker holds the daemon's inherited descriptor on %s:\n%s", secret, fds)
	}
}
