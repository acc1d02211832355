package price

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultHoldsTraceTypes(t *testing.T) {
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key, name string
		gpus      int
	}{
		{"aws", "g4dn.12xlarge", 4},
		{"azure", "Standard_ND40rs_v2", 8},
		{"dgx-ext", "p4d.24xlarge", 8},
		{"a2-highgpu-8g", "a2-highgpu-8g", 8},
	}
	for _, tc := range tests {
		m, err := c.Lookup(tc.key)
		if err != nil {
			t.Fatalf("%s: %v", tc.key, err)
		}
		if m.Name != tc.name || m.GPUs != tc.gpus || m.OnDemand == nil || m.OnDemand.AsOf == "" || m.OnDemand.Source == "" {
			t.Errorf("%s: %+v", tc.key, m)
		}
		if _, err := m.Hourly(true); !errors.Is(err, ErrNoPrice) {
			t.Errorf("%s: spot price should be unknown, err %v", tc.key, err)
		}
	}
	if _, err := c.Lookup("nope"); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("unknown: %v", err)
	}
}

func TestParseValidation(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{"ok", `{"types":[{"name":"x","on_demand":{"usd_per_hour":1,"as_of":"2025-01","source":"s"}}]}`, ""},
		{"unknown field", `{"types":[{"name":"x","colour":"red"}]}`, "unknown field"},
		{"no price", `{"types":[{"name":"x"}]}`, "no price"},
		{"negative price", `{"types":[{"name":"x","on_demand":{"usd_per_hour":-1,"as_of":"d","source":"s"}}]}`, "on_demand price -1"},
		{"no provenance", `{"types":[{"name":"x","spot":{"usd_per_hour":1}}]}`, "without as_of"},
		{"duplicate and empty collected", `{"types":[{"name":"","on_demand":{"usd_per_hour":1,"as_of":"d","source":"s"}},{"name":"a","on_demand":{"usd_per_hour":1,"as_of":"d","source":"s"}},{"name":"a","on_demand":{"usd_per_hour":1,"as_of":"d","source":"s"}}]}`, "duplicate name"},
	}
	for _, tc := range tests {
		_, err := Parse(strings.NewReader(tc.in), "user.json")
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "user.json") {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestMergeOverrides(t *testing.T) {
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	user, err := Parse(strings.NewReader(`{"types":[
		{"name":"g4dn.12xlarge","provider":"aws","gpus":4,"trace_types":["aws"],"on_demand":{"usd_per_hour":2.5,"as_of":"2026-01","source":"my contract"},"spot":{"usd_per_hour":1.2,"as_of":"2026-01","source":"spot history"}},
		{"name":"lab","provider":"onprem","gpus":8,"on_demand":{"usd_per_hour":0,"as_of":"2026-01","source":"owned"}}]}`), "user.json")
	if err != nil {
		t.Fatal(err)
	}
	m := c.Merge(user)
	if len(m.Types) != len(c.Types)+1 {
		t.Fatalf("merged %d types", len(m.Types))
	}
	g, _ := m.Lookup("aws")
	if p, _ := g.Hourly(false); p != 2.5 {
		t.Fatalf("override not applied: %g", p)
	}
	if p, _ := g.Hourly(true); p != 1.2 {
		t.Fatalf("spot: %g", p)
	}
	if orig, _ := c.Lookup("aws"); orig.OnDemand.USDPerHour != 3.912 {
		t.Fatal("merge modified its input")
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, m.Rows()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "g4dn.12xlarge") || !strings.Contains(buf.String(), "1.2000") {
		t.Fatalf("table:\n%s", buf.String())
	}
}

func TestWithOverride(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(path, []byte(`{"types":[{"name":"p4d.24xlarge","gpus":8,"trace_types":["dgx-ext"],"on_demand":{"usd_per_hour":21.96,"as_of":"2026-01","source":"test"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := WithOverride(path)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := c.Lookup("dgx-ext")
	if p, _ := m.Hourly(false); p != 21.96 {
		t.Fatalf("price %g", p)
	}
	if _, err := WithOverride(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "open price catalog") {
		t.Fatalf("missing file: %v", err)
	}
	if c, err := WithOverride(""); err != nil || len(c.Types) != 4 {
		t.Fatalf("default: %v", err)
	}
}

// TestRegionsSlotsAndProviders checks what the catalog adds for the
// clouds: prices per region, a type's worker slots, and each provider's
// billing rule and zones, merged provider by provider.
func TestRegionsSlotsAndProviders(t *testing.T) {
	c, err := Parse(strings.NewReader(`{
		"providers": {"loc": {"billing": {"granularity_s": 1, "minimum_s": 60}, "zones": {"r1": ["a", "b"]}}},
		"types": [
			{"name": "half", "provider": "loc", "region": "r1", "vcpus": 0.5, "memory_gib": 1.5, "slots": 1,
			 "on_demand": {"usd_per_hour": 0.1, "as_of": "d", "source": "s"}, "spot": {"usd_per_hour": 0.04, "as_of": "d", "source": "s"},
			 "regions": {"r2": {"on_demand": {"usd_per_hour": 0.12, "as_of": "d", "source": "s"}}}},
			{"name": "gpu4", "provider": "loc", "region": "r1", "gpus": 4, "on_demand": {"usd_per_hour": 3, "as_of": "d", "source": "s"}},
			{"name": "cpu", "provider": "loc", "region": "r1", "on_demand": {"usd_per_hour": 1, "as_of": "d", "source": "s"}}]}`), "c.json")
	if err != nil {
		t.Fatal(err)
	}
	half, _ := c.Lookup("half")
	for _, tc := range []struct {
		region string
		spot   bool
		want   float64
		err    error
	}{{"", false, 0.1, nil}, {"r1", true, 0.04, nil}, {"r2", false, 0.12, nil}, {"r2", true, 0, ErrNoPrice}, {"r3", false, 0, ErrNoPrice}} {
		got, err := half.HourlyIn(tc.region, tc.spot)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("HourlyIn(%q, %v) = %g, %v; want %g, %v", tc.region, tc.spot, got, err, tc.want, tc.err)
		}
	}
	if _, err := half.HourlyIn("r3", false); err == nil || !strings.Contains(err.Error(), "r1, r2") {
		t.Errorf("an unpriced region should name the priced ones: %v", err)
	}
	gpu4, _ := c.Lookup("gpu4")
	cpu, _ := c.Lookup("cpu")
	if half.WorkerSlots() != 1 || gpu4.WorkerSlots() != 4 || cpu.WorkerSlots() != 1 {
		t.Errorf("slots %d %d %d", half.WorkerSlots(), gpu4.WorkerSlots(), cpu.WorkerSlots())
	}
	if b := c.BillingOf("loc"); b.GranularityS != 1 || b.MinimumS != 60 {
		t.Errorf("billing %+v", b)
	}
	if z := c.Zones("loc", "r1"); len(z) != 2 || c.Zones("loc", "r2") != nil {
		t.Errorf("zones %v", z)
	}
	user, err := Parse(strings.NewReader(`{"providers": {"loc": {"billing": {"granularity_s": 60, "minimum_s": 0}}}, "types": []}`), "u.json")
	if err != nil {
		t.Fatal(err)
	}
	if m := c.Merge(user); m.BillingOf("loc").GranularityS != 60 || c.BillingOf("loc").GranularityS != 1 || len(m.Types) != 3 {
		t.Errorf("merge: %+v (input %+v)", m.Providers, c.Providers)
	}
	for _, bad := range []string{
		`{"types": [{"name": "x", "region": "r", "on_demand": {"usd_per_hour": 1, "as_of": "d", "source": "s"}, "regions": {"r": {}}}]}`,
		`{"types": [{"name": "x", "on_demand": {"usd_per_hour": 1, "as_of": "d", "source": "s"}, "regions": {"r2": {"spot": {"usd_per_hour": 1}}}}]}`,
		`{"types": [{"name": "x", "vcpus": -0.5, "on_demand": {"usd_per_hour": 1, "as_of": "d", "source": "s"}}]}`,
		`{"providers": {"p": {"billing": {"granularity_s": -1}}}, "types": []}`,
	} {
		if _, err := Parse(strings.NewReader(bad), "bad.json"); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", bad, err)
		}
	}
}
