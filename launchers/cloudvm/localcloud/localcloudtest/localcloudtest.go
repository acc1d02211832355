// Package localcloudtest shares one local cloud among the tests of a
// package (one bridge, one cgroup parent) and destroys it in the package's
// TestMain, checking that nothing of it is left.
package localcloudtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/internal/nsmachine"
	"github.com/scavenger-ml/scavenger/internal/subreaper"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/optimizer/price"
)

// Shared is a local cloud opened by the first test that asks for it.
type Shared struct {
	// Catalog, when set, is the cloud's catalog (default: the embedded one).
	Catalog *price.Catalog

	once  sync.Once
	cloud *localcloud.Cloud
	err   error
	dir   string
}

// Get returns the cloud, opening it on first use; it skips the test where
// namespace machines cannot be made (not root).
func (s *Shared) Get(t *testing.T) *localcloud.Cloud {
	t.Helper()
	if err := nsmachine.Check(true); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	s.once.Do(func() {
		if s.err = subreaper.Become(); s.err != nil {
			return
		}
		if s.dir, s.err = os.MkdirTemp("", "localcloud-test-"); s.err != nil {
			return
		}
		s.cloud, s.err = localcloud.Open(context.Background(), localcloud.Options{Logger: zap.NewNop(), Dir: s.dir, Catalog: s.Catalog, Ephemeral: true})
	})
	if s.err != nil {
		t.Fatalf("local cloud: %v", s.err)
	}
	return s.cloud
}

// Main runs the tests, then destroys the cloud and checks that nothing of
// it, and no child process, is left; it exits with the tests' code, or 1.
func (s *Shared) Main(m *testing.M) {
	code := m.Run()
	if s.cloud != nil {
		if err := s.cloud.Destroy(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "destroy the local cloud:", err)
			code = 1
		}
		if left := s.cloud.Leftovers(); len(left) > 0 {
			fmt.Fprintln(os.Stderr, "left of the local cloud:", left)
			code = 1
		}
		_ = os.RemoveAll(s.dir)
	}
	if kids := subreaper.Settle(5 * time.Second); len(kids) > 0 && code == 0 {
		fmt.Fprintln(os.Stderr, "processes left behind:", kids)
		code = 1
	}
	os.Exit(code)
}

// WideCatalog is the local cloud's default catalog (zones loc-a and loc-b)
// and loc.wide, which takes 4 workers on one instance: the launcher
// conformance suite's ranks share a host.
func WideCatalog() *price.Catalog {
	cat := localcloud.DefaultCatalog()
	wide := cat.Types[1] // loc.full's shape and provenance
	wide.Name, wide.MemoryGiB, wide.DiskMiB, wide.Slots = "loc.wide", 2, 64, 4
	wide.OnDemand = &price.Price{USDPerHour: 0.4, AsOf: wide.OnDemand.AsOf, Source: wide.OnDemand.Source}
	wide.Spot = &price.Price{USDPerHour: 0.1, AsOf: wide.Spot.AsOf, Source: wide.Spot.Source}
	cat.Types = append(cat.Types, wide)
	return cat
}
