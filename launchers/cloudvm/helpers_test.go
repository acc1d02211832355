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
	"github.com/scavenger-ml/scavenger/plugins"
)

// shared is the local cloud the tests of this package share (one bridge);
// TestMain destroys it and checks that nothing of it is left.
var shared = localcloudtest.Shared{Catalog: localcloudtest.WideCatalog()}

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
	if o.StateDir == "" { // a launcher after a restart shares its predecessor's
		o.StateDir, o.Owner = t.TempDir(), "test-"+rand.Text()[:6]
	}
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
