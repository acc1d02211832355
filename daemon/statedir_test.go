package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/internal/testuser"
)

// TestPlantedStateDirIsRefused: issue 20's second attack. An unprivileged
// user makes the root daemon's state directory first, with a NATS key and a
// telemetry key of her own in it; or plants her key in a directory of
// root's; or makes the directory under one every user may write without a
// sticky bit. The daemon refuses to start and names the path, and
// CheckStateDir (scavd --check-config) says the same.
func TestPlantedStateDirIsRefused(t *testing.T) {
	mallory := testuser.Add(t, "m")
	shared := testuser.SharedDir(t)
	planted := filepath.Join(shared, "state")
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	mallory.Do(t, func() { // keys that work: she would be the daemon on NATS, and mint any job's tokens
		if err := os.Mkdir(planted, 0o700); err != nil {
			t.Error(err)
		}
		for f, b := range map[string][]byte{"nats.nk": seed, "telemetry.key": make([]byte, 32)} {
			if err := os.WriteFile(filepath.Join(planted, f), b, 0o600); err != nil {
				t.Error(err)
			}
		}
	})
	rootsDir := filepath.Join(shared, "roots")
	if err := os.Mkdir(rootsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(rootsDir, "telemetry.key")
	if err := os.WriteFile(key, make([]byte, 32), 0o600); err != nil || os.Chown(key, mallory.UID, mallory.GID) != nil {
		t.Fatal("plant the key")
	}
	open := filepath.Join(shared, "open")
	if err := os.Mkdir(open, 0o777); err != nil || os.Chmod(open, 0o777) != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  string
		want []string
	}{
		{planted, []string{planted + " is owned by uid", "nats.nk " + filepath.Join(planted, "nats.nk") + ": owned by uid", "telemetry.key"}},
		{rootsDir, []string{key + ": owned by uid"}},
		{filepath.Join(open, "state"), []string{open + " (mode -rwxrwxrwx) is writable by others"}},
	} {
		check := CheckStateDir(c.dir)
		d, err := Start(context.Background(), Config{StateDir: c.dir, Listen: "127.0.0.1:0", NodeSampleEvery: -1},
			zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
		if err == nil {
			t.Errorf("state directory %s: the daemon started", c.dir)
			d.Close()
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) || check == nil || !strings.Contains(check.Error(), w) {
				t.Errorf("state directory %s: refused without saying %q:\n%v\ncheck: %v", c.dir, w, err, check)
			}
		}
	}
	if err := CheckStateDir(filepath.Join(shared, "new", "state")); err != nil {
		t.Errorf("a state directory to be made under a sticky shared directory: %v", err)
	}
}
