package api

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestWirePackageDependsOnNothingElse: api is what any Go program imports
// to talk to scavd, so it links nothing outside the standard library but
// the contract's types (plugins) and the wire messages (telemetry), both
// on the standard library alone: no optimizer, NATS, gRPC or zap.
func TestWirePackageDependsOnNothingElse(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to list the dependencies with: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const mod = "github.com/scavenger-ml/scavenger/"
	allowed := []string{mod + "api", mod + "plugins", mod + "telemetry"}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		if !slices.Contains(allowed, d) {
			t.Errorf("api depends on %s; it may depend on %v and the standard library only", d, allowed)
		}
	}
	if !slices.Contains(deps, mod+"api") {
		t.Errorf("go list -deps printed %q, without api itself", deps)
	}
}
