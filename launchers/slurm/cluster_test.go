package slurm

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/internal/testslurm"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/plugins/conformance"
)

// lines collects output lines per rank as "stream: text".
type lines struct {
	mu sync.Mutex
	by map[int][]string
}

func (l *lines) add(rank int, s plugins.Stream, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[int][]string{}
	}
	l.by[rank] = append(l.by[rank], string(s)+": "+text)
}

func (l *lines) of(rank int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.by[rank]...)
}

// await polls until rank wrote a line containing text.
func (l *lines) await(t *testing.T, ctx context.Context, rank int, text string) {
	t.Helper()
	for {
		for _, s := range l.of(rank) {
			if strings.Contains(s, text) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("rank %d never wrote %q; got %q", rank, text, l.of(rank))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newLauncher returns a launcher for cluster c; jobID "" submits batch jobs.
func newLauncher(t *testing.T, c *testslurm.Cluster, jobID string, mod func(*Options)) *Launcher {
	t.Helper()
	opts := Options{
		Logger:       zaptest.NewLogger(t, zaptest.Level(zap.DebugLevel)),
		JobID:        jobID,
		Env:          []string{"SLURM_CONF=" + c.Conf, "OMP_NUM_THREADS=1"},
		Grace:        500 * time.Millisecond,
		PollInterval: 100 * time.Millisecond,
		SrunArgs:     []string{"--exact"}, // several steps at once in one allocation
		WorkDir:      t.TempDir(),
	}
	if mod != nil {
		mod(&opts)
	}
	l, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// overGRPC serves l over go-plugin's real gRPC transport and returns the client side.
func overGRPC(t *testing.T, l plugins.Launcher) plugins.Launcher {
	client, _ := plugin.TestPluginGRPCConn(t, false, plugins.PluginSet(l, zap.NewNop()))
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(plugins.PluginName)
	if err != nil {
		t.Fatalf("Dispense: %v", err)
	}
	return raw.(plugins.Launcher)
}

// TestCluster runs every test that needs the real Slurm against one cluster.
func TestCluster(t *testing.T) {
	c := testslurm.Start(t, testslurm.Options{CPUs: 64})
	alloc := c.Hold(t, 32)

	t.Run("ConformanceInAllocation", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) plugins.Launcher { return newLauncher(t, c, alloc, nil) })
	})
	t.Run("ConformanceInAllocationOverGRPC", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) plugins.Launcher { return overGRPC(t, newLauncher(t, c, alloc, nil)) })
	})
	t.Run("ConformanceSubmitted", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) plugins.Launcher { return newLauncher(t, c, "", nil) })
	})
}
