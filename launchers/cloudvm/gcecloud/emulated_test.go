package gcecloud

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/api/option"

	"github.com/scavenger-ml/scavenger/internal/gceemu"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud/localcloudtest"
	"github.com/scavenger-ml/scavenger/optimizer/price"
)

// The tests run the provider, with Google's client, against the emulation
// of the compute API (internal/gceemu) whose instances are the local
// cloud's machines.

// shared is the local cloud the tests share: its default types, and
// loc.wide, which takes the conformance suite's 4 ranks on one instance.
var shared = localcloudtest.Shared{Catalog: localcloudtest.WideCatalog()}

func TestMain(m *testing.M) { shared.Main(m) }

// emulated is an emulated GCE project and a provider pointed at it.
type emulated struct {
	emu  *gceemu.Emulator
	prov *Provider
	back *localcloud.Cloud
}

// emulate serves an emulated us-central1 (zones a and b on the local
// cloud's loc-a and loc-b; e2-standard-2 is loc.half, e2-standard-4
// loc.full, e2-standard-8 loc.wide) and makes a provider for it.
func emulate(t *testing.T) emulated {
	t.Helper()
	back := shared.Get(t)
	emu, err := gceemu.New(gceemu.Options{Backend: localcloudtest.Backend(back), Project: "scav-emulated",
		Types: map[string]string{"e2-standard-2": "loc.half", "e2-standard-4": "loc.full", "e2-standard-8": "loc.wide"},
		Zones: []string{"us-central1-a", "us-central1-b"}, BackendZones: []string{"loc-a", "loc-b"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
	t.Cleanup(srv.Close)
	cat, err := price.LoadFile("testdata/catalog.json")
	if err != nil {
		t.Fatal(err)
	}
	prov, err := New(context.Background(), Options{Logger: zaptest.NewLogger(t), Project: "scav-emulated", Zones: []string{"us-central1-a", "us-central1-b"},
		Types: []string{"e2-standard-2", "e2-standard-4", "e2-standard-8"}, Catalog: cat, Image: "projects/debian-cloud/global/images/family/debian-12",
		Endpoint: srv.URL + "/compute/v1/", ClientOptions: []option.ClientOption{option.WithoutAuthentication()}, Metadata: back.Metadata(),
		Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return emulated{emu: emu, prov: prov, back: back}
}
