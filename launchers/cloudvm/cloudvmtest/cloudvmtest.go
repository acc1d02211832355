// Package cloudvmtest holds what the tests of cloudvm's cloud providers
// share: a launcher over a provider, keys to boot with, and a collector of
// the workers' output lines.
package cloudvmtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/plugins"
)

// Boot is a client key and a host key to boot instances with.
func Boot(t *testing.T) provider.Boot {
	t.Helper()
	k, err := provider.NewKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k.Boot
}

// Launcher is a cloudvm launcher over p offering types, with an owner of
// its own, fast notices and retries; its cleanup closes it and checks that
// no instance of it is left.
func Launcher(t *testing.T, p provider.Provider, log *zap.Logger, types ...string) *cloudvm.Launcher {
	t.Helper()
	owner := "t-" + rand.Text()[:5]
	l, err := cloudvm.New(context.Background(), cloudvm.Options{Logger: log, Provider: p, StateDir: t.TempDir(), Owner: owner,
		Types: types, NoTelemetryForward: true, NoticeInterval: 100 * time.Millisecond, RetryBase: 20 * time.Millisecond, Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
		if left, _ := p.List(context.Background(), map[string]string{provider.TagOwner: owner}); len(left) > 0 {
			t.Errorf("left: %v", left)
		}
	})
	return l
}

// Lines collects an attempt's output lines as "RANK: LINE".
type Lines struct {
	mu sync.Mutex
	l  []string
}

// Add is a plugins.OutputFunc.
func (o *Lines) Add(rank int, _ plugins.Stream, s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.l = append(o.l, fmt.Sprintf("%d: %s", rank, s))
}

// Has reports whether line s was seen.
func (o *Lines) Has(s string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Contains(o.l, s)
}

// Count is how many lines contain sub.
func (o *Lines) Count(sub string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, s := range o.l {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// All is every line so far.
func (o *Lines) All() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.l)
}

// Preempted interrupts one of the attempt h's instances (interrupt), and
// checks that every one of its workers heard the pre-emption signal (they
// print "pre-empted on ..." into out), that the attempt then ended 0, and
// that l offers its one type on demand only, at onDemand $/hour: spot is
// blocklisted where the attempt met no capacity and where it was reclaimed.
func Preempted(t *testing.T, ctx context.Context, l *cloudvm.Launcher, h plugins.Handle, out *Lines, workers int, onDemand float64, interrupt func() error) {
	t.Helper()
	if err := interrupt(); err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(ctx)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
	if n := out.Count("pre-empted on"); n != workers {
		t.Errorf("%d workers got the pre-emption signal, want %d: %q", n, workers, out.All())
	}
	caps, err := l.Capabilities(ctx)
	if err != nil || len(caps.Offers) != 1 || caps.Offers[0].SpotUSD != 0 || caps.Offers[0].OnDemandUSD != onDemand {
		t.Errorf("offers %+v, %v: want one type, on demand only at $%g/h", caps.Offers, err, onDemand)
	}
}
