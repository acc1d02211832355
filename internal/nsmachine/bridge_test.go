package nsmachine

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"
)

// TestBridgeKeepsItsAddress plugs a link with a lower MAC address than any
// into a new bridge and checks that the bridge's own address does not
// change: a bridge that took its lowest port's would change it under the
// machines already plugged in, whose neighbour entries for it then lead
// nowhere for seconds.
func TestBridgeKeepsItsAddress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: making a bridge needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	br, sfx := testBridge(t, ctx, "scvb")
	before := linkAddr(t, br.Name)
	veth := "scvv" + sfx
	if err := IP(ctx, "link", "add", veth, "address", "00:00:00:00:00:01", "type", "veth", "peer", "name", veth+"p"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = IP(context.Background(), "link", "del", veth) })
	if err := IP(ctx, "link", "set", veth, "master", br.Name); err != nil {
		t.Fatal(err)
	}
	if after := linkAddr(t, br.Name); after != before {
		t.Errorf("the bridge's address changed from %s to %s when a link was plugged in", before, after)
	}
}

// testBridge makes a bridge named prefix and a random suffix, deleted (and
// checked gone) when the test ends; it returns the bridge and the suffix,
// for the test's other names.
func testBridge(t *testing.T, ctx context.Context, prefix string) (Bridge, string) {
	t.Helper()
	sfx := strings.ToLower(rand.Text()[:5])
	br, err := CreateBridge(ctx, prefix+sfx)
	if err != nil {
		t.Fatalf("CreateBridge: %v", err)
	}
	t.Cleanup(func() {
		if err := br.Delete(context.Background()); err != nil || br.Exists() {
			t.Errorf("delete bridge: %v", err)
		}
	})
	return br, sfx
}

func linkAddr(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("/sys/class/net/" + name + "/address")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
