package jobs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testuser"
	"github.com/scavenger-ml/scavenger/plugins"
)

// TestRootResumesWithTheOwnersEnvironment: issue 20's sixth attack. Root
// resumes mallory's failed job: her worker runs with the environment her job
// ran with, not root's (no AWS_SECRET_ACCESS_KEY of root's, not root's PATH).
func TestRootResumesWithTheOwnersEnvironment(t *testing.T) {
	mallory := testuser.Add(t, "m")
	g, _, _ := registryWith(t, func(o *Options) {
		o.CheckpointRoot = filepath.Join(testuser.SharedDir(t), "ckpt")
		o.EnvDir = t.TempDir()
	})
	owner := api.Owner{UID: uint32(mallory.UID), GID: uint32(mallory.GID), User: mallory.Name, Home: "/nonexistent"}
	script := `env > "$SCAV_CHECKPOINT_DIR/env-$SCAV_ATTEMPT"; printf x > "$SCAV_CHECKPOINT_DIR/ck"; ` +
		`printf '{"format":"scavenger.manifest/1","checkpoint":"ck","step":1,"size":1}' > "$SCAV_CHECKPOINT_DIR/latest.json"; exit 3`
	none := 0
	j, err := g.Submit(t.Context(), api.RunRequest{Name: "envjob", Command: []string{"/bin/sh", "-c", script}, Dir: "/",
		Config: plugins.Config{Workers: 1}, MaxRestarts: &none, Env: []string{"PATH=/usr/bin:/bin", "MALLORY_VAR=hers"}}, owner)
	if err != nil {
		t.Fatal(err)
	}
	ended := func(attempt int) api.Job {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			j, err := g.Get(t.Context(), j.ID)
			if err == nil && j.State.Done() && j.Attempt == attempt && g.running(j.ID) == nil {
				return j
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s did not end attempt %d: %+v %v", j.ID, attempt, j.State, err)
			}
		}
	}
	if j := ended(1); j.State != api.StateFailed {
		t.Fatalf("attempt 1: %s %s", j.State, j.Message)
	}
	rootEnv := []string{"PATH=/root/bin:/usr/sbin:/usr/bin:/bin", "AWS_SECRET_ACCESS_KEY=roots-secret"}
	if _, err := g.Resume(t.Context(), j.ID, rootEnv, api.Owner{User: "root"}); err != nil {
		t.Fatal(err)
	}
	ended(2)
	b, err := os.ReadFile(filepath.Join(j.CheckpointDir, "env-2"))
	if err != nil {
		t.Fatal(err)
	}
	env := string(b)
	for _, leak := range []string{"roots-secret", "/root/bin"} {
		if strings.Contains(env, leak) {
			t.Errorf("mallory's resumed worker sees root's %q:\n%s", leak, env)
		}
	}
	if !strings.Contains(env, "MALLORY_VAR=hers") {
		t.Errorf("mallory's resumed worker lacks her environment:\n%s", env)
	}
}

// TestResumeLooksTheOwnerUpAgain: a job runs anew (a resume) with its
// owner's groups as they are now, and not at all when its uid has become
// another user's.
func TestResumeLooksTheOwnerUpAgain(t *testing.T) {
	mallory := testuser.Add(t, "m")
	stale := api.Owner{UID: uint32(mallory.UID), GID: uint32(mallory.GID), User: mallory.Name, Groups: []uint32{0, 27}}
	j := api.Job{ID: "again-000001", Owner: &stale}
	if err := refreshOwner(&j); err != nil || slices.Contains(j.Owner.Groups, 0) {
		t.Errorf("mallory's groups after a look-up: %+v %v; want hers now, not root's group", j.Owner, err)
	}
	renamed := "x" + mallory.Name
	if out, err := exec.Command("usermod", "-l", renamed, mallory.Name).CombinedOutput(); err != nil {
		t.Fatalf("usermod: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("usermod", "-l", mallory.Name, renamed).Run() })
	j.Owner = &stale
	if err := refreshOwner(&j); err == nil || !strings.Contains(err.Error(), "is "+renamed+"'s now") {
		t.Errorf("a job whose uid is another user's now: %v", err)
	}
}
