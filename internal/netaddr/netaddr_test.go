package netaddr

import "testing"

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:0": true, "localhost:80": true, "[::1]:9": true, "127.1.2.3:5": true,
		"0.0.0.0:80": false, ":80": false, "10.0.0.1:80": false, "example.com:80": false, "127.0.0.1": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
