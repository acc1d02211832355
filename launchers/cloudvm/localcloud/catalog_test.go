package localcloud

import (
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

// TestCatalog checks the embedded catalog and the catalogs of the tests
// and the bench (price.Catalog's schema), and that a catalog the local
// cloud cannot sell from is refused with every reason at once.
func TestCatalog(t *testing.T) {
	c := DefaultCatalog()
	if z := c.Zones(Provider, Region); strings.Join(z, ",") != "loc-a,loc-b" {
		t.Errorf("zones %v", z)
	}
	if b := billing(c); b != (provider.Billing{Granularity: time.Second, Minimum: time.Minute}) {
		t.Errorf("billing %+v", b)
	}
	half, ok := lookup(c, "loc.half")
	if od, _ := half.Hourly(false); !ok || half.VCPUs != 0.5 || memoryMiB(half) != 1536 || half.WorkerSlots() != 1 || od != 0.10 || spotUSD(half) != 0.04 {
		t.Errorf("loc.half %+v", half)
	}
	for _, path := range []string{"../../../cmd/scavctl/testdata/cloud-catalog.json", "../../../tools/benchcloud/catalog.json"} {
		if _, err := LoadCatalog(path); err != nil {
			t.Error(err)
		}
	}
	_, err := ParseCatalog([]byte(`{"types": [{"name": "x", "region": "local", "on_demand": {"usd_per_hour": 1, "as_of": "d", "source": "s"}}]}`), "bad.json")
	if err == nil || !strings.Contains(err.Error(), "no zones") || !strings.Contains(err.Error(), "type x: want vcpus") || !strings.Contains(err.Error(), "bad.json") {
		t.Errorf("bad catalog: %v", err)
	}
}
