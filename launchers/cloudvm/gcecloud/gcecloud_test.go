package gcecloud

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/internal/gceemu"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/cloudvmtest"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

// TestPrices checks the catalog's prices in the zones' region: on demand
// per type, spot per zone where the catalog has a spot price.
func TestPrices(t *testing.T) {
	e := emulate(t)
	ps, err := e.prov.Prices(context.Background(), []string{"e2-standard-2", "e2-standard-8"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, p := range ps {
		got[p.Type+"/"+p.Zone+"/"+p.Market] = p.USDPerHour
	}
	want := map[string]float64{"e2-standard-2//on-demand": 0.067006, "e2-standard-2/us-central1-a/spot": 0.0201, "e2-standard-2/us-central1-b/spot": 0.0201,
		"e2-standard-8//on-demand": 0.268024}
	if len(got) != len(want) {
		t.Errorf("prices %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("price %s = %g, want %g", k, got[k], v)
		}
	}
	if b := e.prov.Billing(); b.Granularity != time.Second || b.Minimum != time.Minute {
		t.Errorf("billing %+v", b)
	}
	types, _ := e.prov.Types(context.Background())
	if types[2].Slots != 4 || types[0].Slots != 1 || !types[0].Spot || types[2].Spot {
		t.Errorf("types %+v", types)
	}
}

// TestInstanceLifecycle inserts two spot instances with labels and the
// pool's keys: the same request again (its answer lost) returns the same
// instances, they run and are listed by tag — the exact tags, kept in
// metadata, not only the lower-case labels — and deleted.
func TestInstanceLifecycle(t *testing.T) {
	e := emulate(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tags := map[string]string{provider.TagOwner: "O-" + rand.Text()[:5], provider.TagJob: "Job_1", provider.TagName: "scavenger-Job_1"}
	req := provider.ProvisionRequest{Type: "e2-standard-2", Count: 2, Market: provider.Spot, Zone: "us-central1-b", Tags: tags, Token: "tok-" + rand.Text()[:6], Boot: cloudvmtest.Boot(t)}
	insts, err := e.prov.Provision(ctx, req)
	if err != nil || len(insts) != 2 || insts[0].Market != provider.Spot || insts[0].Zone != "us-central1-b" || insts[0].Tags[provider.TagJob] != "Job_1" {
		t.Fatalf("Provision = %+v, %v", insts, err)
	}
	again, err := e.prov.Provision(ctx, req)
	if err != nil || len(again) != 2 || again[0].ID != insts[0].ID || again[1].ID != insts[1].ID {
		t.Fatalf("Provision of the same request = %+v, %v; want the same instances", again, err)
	}
	if n := e.emu.Calls("instances.insert"); n != 4 {
		t.Errorf("%d inserts, want 4 (2 of them answered for their requestId)", n)
	}
	ids := []string{insts[0].ID, insts[1].ID}
	ready, err := e.prov.WaitReady(ctx, ids)
	if err != nil || len(ready) != 2 || ready[0].State != provider.Running || ready[0].Addr == "" {
		t.Fatalf("WaitReady = %+v, %v", ready, err)
	}
	listed, err := e.prov.List(ctx, map[string]string{provider.TagOwner: tags[provider.TagOwner], provider.TagJob: "Job_1"})
	if err != nil || len(listed) != 2 {
		t.Fatalf("List = %+v, %v", listed, err)
	}
	if other, _ := e.prov.List(ctx, map[string]string{provider.TagOwner: strings.ToLower(tags[provider.TagOwner])}); len(other) != 0 {
		t.Errorf("List by a tag whose label is the same lists %v: the exact tags decide", other)
	}
	if err := e.prov.Terminate(ctx, ids); err != nil {
		t.Fatal(err)
	}
	if listed, _ := e.prov.List(ctx, tags); len(listed) != 0 {
		t.Fatalf("List after Terminate = %+v", listed)
	}
	if err := e.prov.Terminate(ctx, []string{"us-central1-a/scav-unknown-0"}); err != nil {
		t.Errorf("Terminate of an unknown instance = %v, want nil", err)
	}
}

// TestErrorClasses: ZONE_RESOURCE_POOL_EXHAUSTED is a capacity error,
// QUOTA_EXCEEDED a quota error (per provisioning model), rateLimitExceeded
// throttling that cloudvm retries.
func TestErrorClasses(t *testing.T) {
	e := emulate(t)
	ctx := context.Background()
	req := provider.ProvisionRequest{Type: "e2-standard-2", Count: 1, Market: provider.OnDemand, Zone: "us-central1-a", Token: "t-" + rand.Text()[:6], Boot: cloudvmtest.Boot(t)}
	e.emu.SetFaults(gceemu.Faults{NoCapacity: []string{"us-central1-a"}})
	if _, err := e.prov.Provision(ctx, req); !errors.Is(err, provider.ErrCapacity) || !strings.Contains(err.Error(), "ZONE_RESOURCE_POOL_EXHAUSTED") {
		t.Errorf("no capacity: %v, want ErrCapacity", err)
	}
	e.emu.SetFaults(gceemu.Faults{Quota: map[string]string{"SPOT": "PREEMPTIBLE_CPUS"}})
	req.Market, req.Token = provider.Spot, "t-"+rand.Text()[:6]
	if _, err := e.prov.Provision(ctx, req); !errors.Is(err, provider.ErrQuota) || !strings.Contains(err.Error(), "QUOTA_EXCEEDED") {
		t.Errorf("no spot quota: %v, want ErrQuota", err)
	}
	e.emu.SetFaults(gceemu.Faults{Throttle: 1})
	if _, err := e.prov.List(ctx, nil); !errors.Is(err, provider.ErrThrottled) || !provider.Retryable(err) {
		t.Errorf("rate limited: %v, want ErrThrottled", err)
	}
	e.emu.SetFaults(gceemu.Faults{})
}
