package localcloud

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/internal/nsmachine"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

// TestCleanup: a local cloud no process has open any more — a test killed
// midway, a scavd stopped for good — is destroyed by the next cleanup: at
// once when it was ephemeral (a test's), once it has not been heard of for
// the stale age otherwise, and always by a cleanup of everything (scavd
// --cloud-cleanup); one that is open is never touched; a cloud whose
// directory is gone is swept by its names.
func TestCleanup(t *testing.T) {
	if err := nsmachine.Check(true); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	defer func(d string) { registryDir = d }(registryDir)
	registryDir = t.TempDir() // this test's clouds only: another's are not its to clean
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := zaptest.NewLogger(t)
	k := newKeys(t)
	open := func(ephemeral bool) (*Cloud, string) {
		t.Helper()
		c, err := Open(ctx, Options{Logger: log, Dir: t.TempDir(), Ephemeral: ephemeral})
		if err != nil {
			t.Fatal(err)
		}
		return c, k.up(t, ctx, c, provider.ProvisionRequest{Type: "loc.half", Market: provider.OnDemand, Zone: "loc-a", Token: "c"}).ID
	}
	gone := func(c *Cloud) bool {
		return !c.st.Bridge.Exists() && !nsmachine.CgroupExists(c.cgroupParent()) && len(c.Leftovers()) == 0 && !netnsWithPrefix("scavenger-"+c.st.ID+"-")
	}
	killed, _ := open(true) // a test's cloud, its test killed: Close is what the kernel does to its lock
	killed.Close()
	stopped, _ := open(false) // a scavd's, stopped for now
	stopped.Close()
	if !gone(killed) {
		t.Fatal("opening a cloud did not destroy the killed test's")
	}
	running, _ := open(false)
	defer func() { _ = running.Destroy(context.Background()) }()
	swept, _ := open(true) // a killed test's whose temporary directory was removed
	swept.Close()
	if err := os.RemoveAll(swept.o.Dir); err != nil {
		t.Fatal(err)
	}

	destroyed, err := Cleanup(ctx, log, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(destroyed, []string{swept.st.ID}) || !gone(swept) {
		t.Fatalf("Cleanup destroyed %v, want %v (the ephemeral one left)", destroyed, swept.st.ID)
	}
	if gone(stopped) || gone(running) {
		t.Fatal("a stopped scavd's cloud, heard of a moment ago, or an open one was destroyed")
	}
	destroyed, err = Cleanup(ctx, log, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(destroyed, []string{stopped.st.ID}) || !gone(stopped) || gone(running) {
		t.Fatalf("Cleanup of everything destroyed %v, want %v only (%s is open)", destroyed, stopped.st.ID, running.st.ID)
	}
	if _, err := os.Stat(filepath.Join(registryDir, stopped.st.ID+".json")); !os.IsNotExist(err) {
		t.Errorf("the destroyed cloud is still registered: %v", err)
	}
}
