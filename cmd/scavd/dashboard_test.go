package main

import (
	"strings"
	"testing"
)

// TestDashboardListenNeedsTLSOffLoopback: scavd refuses to serve the
// dashboard's links off loopback without the API's certificate.
func TestDashboardListenNeedsTLSOffLoopback(t *testing.T) {
	_, err := loadWith(t, "--dashboard-listen", "0.0.0.0:8080")
	if err == nil || !strings.Contains(err.Error(), "--dashboard-listen") || !strings.Contains(err.Error(), "needs TLS") {
		t.Errorf("off loopback without TLS: %v", err)
	}
	if _, err := loadWith(t, "--dashboard-listen", "127.0.0.1:9000"); err != nil {
		t.Errorf("loopback: %v", err)
	}
	if _, err := loadWith(t, "--dashboard-listen", ""); err != nil {
		t.Errorf("none: %v", err)
	}
}
