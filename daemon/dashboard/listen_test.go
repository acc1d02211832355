package dashboard

import (
	"context"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/api"
)

// TestNoListenerOffLoopbackWithoutTLS: the link listener listens off
// loopback only with a certificate, and not at all without an address.
func TestNoListenerOffLoopbackWithoutTLS(t *testing.T) {
	for _, c := range []struct {
		addr, cert, key string
		ok              bool
	}{
		{"127.0.0.1:0", "", "", true},
		{"localhost:8080", "", "", true},
		{"[::1]:0", "", "", true},
		{"", "", "", true},
		{"0.0.0.0:8080", "", "", false},
		{"10.1.2.3:8080", "", "", false},
		{":8080", "", "", false},
		{"0.0.0.0:8080", "c.pem", "k.pem", true},
		{"0.0.0.0:8080", "c.pem", "", false},
	} {
		err := CheckListen(c.addr, c.cert, c.key)
		if (err == nil) != c.ok || err != nil && !strings.Contains(err.Error(), "needs TLS") {
			t.Errorf("CheckListen(%q, %q, %q) = %v", c.addr, c.cert, c.key, err)
		}
	}
	s := New(context.Background(), Options{Listen: "0.0.0.0:0"})
	defer s.Close(context.Background())
	if _, err := s.Link(context.Background(), api.Owner{User: "alice", UID: 1001}); err == nil || s.Addr() != "" {
		t.Errorf("a link off loopback without TLS: %v (listening at %q)", err, s.Addr())
	}
	s2 := New(context.Background(), Options{})
	defer s2.Close(context.Background())
	if _, err := s2.Link(context.Background(), api.Owner{User: "alice", UID: 1001}); err == nil || !strings.Contains(err.Error(), "dashboard_listen is empty") {
		t.Errorf("a link without an address: %v", err)
	}
}
