package cloudvm

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud/localcloudtest"
	"github.com/scavenger-ml/scavenger/optimizer/price"
	"github.com/scavenger-ml/scavenger/plugins"
)

// shared is the local cloud the tests of this package share (one bridge);
// TestMain destroys it and checks that nothing of it is left.
var shared = localcloudtest.Shared{Catalog: testCatalog()}

// testCatalog is the default catalog (zones loc-a and loc-b), plus
// loc.wide, which takes 4 workers on one instance (the conformance suite's
// ranks share a host).
func testCatalog() *price.Catalog {
	cat := localcloud.DefaultCatalog()
	wide := cat.Types[1] // loc.full's shape and provenance
	wide.Name, wide.MemoryGiB, wide.DiskMiB, wide.Slots = "loc.wide", 2, 64, 4
	wide.OnDemand = &price.Price{USDPerHour: 0.4, AsOf: wide.OnDemand.AsOf, Source: wide.OnDemand.Source}
	wide.Spot = &price.Price{USDPerHour: 0.1, AsOf: wide.Spot.AsOf, Source: wide.Spot.Source}
	cat.Types = append(cat.Types, wide)
	return cat
}

// testCloud is the shared local cloud.
func testCloud(t *testing.T) *localcloud.Cloud { return shared.Get(t) }

func TestMain(m *testing.M) { shared.Main(m) }

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
	o.Owner = "test-" + rand.Text()[:6]
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
