package cloudvm

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/internal/nsmachine"
	"github.com/scavenger-ml/scavenger/internal/subreaper"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/plugins"
)

var (
	cloudOnce sync.Once
	cloud     *localcloud.Cloud
	cloudErr  error
	cloudDir  string
)

// testCloud is the local cloud the tests of this package share (one bridge);
// TestMain destroys it and checks that nothing of it is left.
func testCloud(t *testing.T) *localcloud.Cloud {
	t.Helper()
	if err := nsmachine.Check(true); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	cloudOnce.Do(func() {
		if cloudErr = subreaper.Become(); cloudErr != nil {
			return
		}
		if cloudDir, cloudErr = os.MkdirTemp("", "cloudvm-test-"); cloudErr != nil {
			return
		}
		cat := localcloud.DefaultCatalog()
		cat.Zones = []string{"loc-a", "loc-b"}
		// loc.wide takes 4 workers on one instance (the conformance suite's
		// ranks share a host).
		cat.Types = append(cat.Types, localcloud.Type{Name: "loc.wide", CPUs: 1, MemoryMiB: 2048, DiskMiB: 64, Slots: 4, OnDemandUSD: 0.4, SpotUSD: 0.1})
		cloud, cloudErr = localcloud.Open(context.Background(), localcloud.Options{Logger: zap.NewNop(), Dir: cloudDir, Catalog: cat})
	})
	if cloudErr != nil {
		t.Fatalf("local cloud: %v", cloudErr)
	}
	return cloud
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cloud != nil {
		if err := cloud.Destroy(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "destroy the local cloud:", err)
			code = 1
		}
		if left := cloud.Leftovers(); len(left) > 0 {
			fmt.Fprintln(os.Stderr, "left of the local cloud:", left)
			code = 1
		}
		_ = os.RemoveAll(cloudDir)
	}
	if kids := subreaper.Settle(5 * time.Second); len(kids) > 0 && code == 0 {
		fmt.Fprintln(os.Stderr, "processes left behind:", kids)
		code = 1
	}
	os.Exit(code)
}

// newLauncher makes a launcher on prov (the shared cloud when nil) with its
// own owner and state directory, closed when the test ends.
func newLauncher(t *testing.T, o Options) *Launcher {
	t.Helper()
	if o.Provider == nil {
		o.Provider = testCloud(t)
	}
	if o.Logger == nil {
		o.Logger = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	}
	o.StateDir = t.TempDir()
	o.Owner = "test-" + nsmachine.RandomHex(6)
	if o.Grace == 0 {
		o.Grace = 500 * time.Millisecond
	}
	if o.NoticeInterval == 0 {
		o.NoticeInterval = 100 * time.Millisecond
	}
	if o.RetryBase == 0 {
		o.RetryBase = 10 * time.Millisecond
	}
	l, err := New(context.Background(), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		ctx := context.Background()
		if left, _ := l.o.Provider.List(ctx, map[string]string{"scavenger:owner": l.o.Owner}); len(left) > 0 {
			t.Errorf("instances left after Close: %v", left)
		}
	})
	return l
}

// output collects an attempt's lines.
type output struct {
	mu    sync.Mutex
	lines []string
}

func (o *output) add(rank int, _ plugins.Stream, line string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lines = append(o.lines, fmt.Sprintf("%d: %s", rank, line))
}

func (o *output) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.lines...)
}
