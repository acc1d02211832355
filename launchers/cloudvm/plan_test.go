package cloudvm

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"go.uber.org/zap/zaptest"
)

func TestPlanPool(t *testing.T) {
	t0 := time.Unix(1000, 0)
	h := func(id, typ, market string, age int, doomed bool) held {
		return held{ID: id, Type: typ, Market: market, Launched: t0.Add(-time.Duration(age) * time.Second), Doomed: doomed}
	}
	const od, spot = provider.OnDemand, provider.Spot
	for _, tt := range []struct {
		name  string
		pool  []held
		want  want
		limit int
		plan  poolPlan
	}{
		{"empty pool", nil, want{"a", od, 2}, 0, poolPlan{Add: 2}},
		{"grow keeps what it has", []held{h("i1", "a", od, 5, false)}, want{"a", od, 3}, 0, poolPlan{Keep: []string{"i1"}, Add: 2}},
		{"shrink releases the youngest surplus at once", []held{h("i1", "a", od, 5, false), h("i2", "a", od, 9, false), h("i3", "a", od, 1, false)},
			want{"a", od, 2}, 0, poolPlan{Keep: []string{"i2", "i1"}, ReleaseNow: []string{"i3"}}},
		{"type change: new first, old after", []held{h("i1", "a", od, 5, false), h("i2", "a", od, 5, false)}, want{"b", od, 2}, 0,
			poolPlan{Add: 2, ReleaseAfter: []string{"i1", "i2"}}},
		{"type change over the limit releases the old first", []held{h("i1", "a", od, 5, false), h("i2", "a", od, 5, false)}, want{"b", od, 2}, 3,
			poolPlan{Add: 2, ReleaseNow: []string{"i1", "i2"}}},
		{"a doomed instance is replaced", []held{h("i1", "a", spot, 5, true), h("i2", "a", spot, 5, false)}, want{"a", spot, 2}, 0,
			poolPlan{Keep: []string{"i2"}, Add: 1, ReleaseNow: []string{"i1"}}},
		{"spot reuses an on-demand fallback, exact market first", []held{h("i1", "a", od, 9, false), h("i2", "a", spot, 1, false)}, want{"a", spot, 1}, 0,
			poolPlan{Keep: []string{"i2"}, ReleaseNow: []string{"i1"}}},
		{"on demand does not take spot instances", []held{h("i1", "a", spot, 9, false)}, want{"a", od, 1}, 0,
			poolPlan{Add: 1, ReleaseAfter: []string{"i1"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := planPool(tt.pool, tt.want, tt.limit); !reflect.DeepEqual(got, tt.plan) {
				t.Errorf("planPool = %+v, want %+v", got, tt.plan)
			}
		})
	}
}

func TestInstancesFor(t *testing.T) {
	for _, tt := range []struct {
		k, slots int
		self     bool
		n        int
	}{{1, 1, false, 1}, {2, 1, false, 2}, {3, 2, false, 2}, {4, 2, false, 2}, {5, 4, false, 2}, {8, 4, true, 1}, {2, 0, false, 2}} {
		if got := instancesFor(tt.k, tt.slots, tt.self); got != tt.n {
			t.Errorf("instancesFor(%d, %d, %v) = %d, want %d", tt.k, tt.slots, tt.self, got, tt.n)
		}
	}
}

func TestFailover(t *testing.T) {
	now := time.Unix(1000, 0)
	zones := []string{"z1", "z2"}
	b := blocklist{}
	o := func(z, m string) offering { return offering{"a", z, m} }
	all := []offering{o("z1", "spot"), o("z2", "spot"), o("z1", "on-demand"), o("z2", "on-demand")}
	if got := failover("a", "spot", zones, true, b, now); !reflect.DeepEqual(got, all) {
		t.Fatalf("failover = %v, want %v", got, all)
	}
	if got := failover("a", "spot", zones, false, b, now); !reflect.DeepEqual(got, all[:2]) {
		t.Errorf("without fallback = %v, want %v", got, all[:2])
	}
	b.add(o("z1", "spot"), now, time.Minute)
	b.add(o("z1", "spot"), now, time.Second) // never shortened
	if got := failover("a", "spot", zones, true, b, now.Add(30*time.Second)); !reflect.DeepEqual(got, all[1:]) {
		t.Errorf("with z1 spot blocked = %v, want %v", got, all[1:])
	}
	b.add(o("z2", "spot"), now, time.Minute)
	if got := failover("a", "spot", zones, false, b, now); len(got) != 0 {
		t.Errorf("every spot zone blocked, no fallback = %v, want nothing", got)
	}
	b.expire(now.Add(time.Minute))
	if len(b) != 0 || !reflect.DeepEqual(failover("a", "spot", zones, true, b, now.Add(time.Minute)), all) {
		t.Errorf("after the blocks expire: %v", b)
	}
}

// TestBadPreemptSignalIsRefusedAtNew: a pre-emption signal the workers
// cannot be given is an error of New, not of the first spot notice.
func TestBadPreemptSignalIsRefusedAtNew(t *testing.T) {
	_, err := New(context.Background(), Options{Logger: zaptest.NewLogger(t), Provider: testCloud(t), StateDir: t.TempDir(), PreemptSignal: "HUP"})
	if err == nil || !strings.Contains(err.Error(), `"HUP"`) {
		t.Fatalf("New with PreemptSignal HUP: %v; want an error naming it", err)
	}
}

// TestPricesOver checks how a spot price history becomes a charge's
// prices: the one in effect at the launch, then its changes.
func TestPricesOver(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	p := func(s, usd float64) provider.Price {
		return provider.Price{At: t0.Add(time.Duration(s * float64(time.Second))), USDPerHour: usd}
	}
	for _, tc := range []struct {
		name    string
		hist    []provider.Price
		at      float64
		changes int
	}{
		{"older price in effect", []provider.Price{p(-100, 1), p(-50, 2), p(10, 3)}, 2, 1},
		{"only newer: the first", []provider.Price{p(5, 4), p(10, 5)}, 4, 1},
		{"a repeat is no change", []provider.Price{p(-1, 1), p(5, 1), p(6, 2), p(7, 2)}, 1, 1},
	} {
		at, ch := pricesOver(tc.hist, t0)
		if at != tc.at || len(ch) != tc.changes {
			t.Errorf("%s: %g, %+v; want %g and %d changes", tc.name, at, ch, tc.at, tc.changes)
		}
	}
}
