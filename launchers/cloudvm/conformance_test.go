package cloudvm

import (
	"testing"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/plugins/conformance"
	"github.com/scavenger-ml/scavenger/plugins/goplugin"
)

// conformanceLauncher is a launcher for the suite, whose ranks share a
// host: its type takes 4 workers an instance. The suite checks that
// SCAV_SOCKET reaches the workers as given, so the telemetry socket is not
// forwarded (the local cloud's instances share this filesystem). Its
// warnings are the test's log: a host it declares lost says why.
func conformanceLauncher(t *testing.T) *Launcher {
	return newLauncher(t, Options{Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), Types: []string{"loc.wide"}, NoTelemetryForward: true})
}

// TestConformance runs the launcher suite against cloudvm on the local
// cloud, in process: every subtest provisions its own instances.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) plugins.Launcher { return conformanceLauncher(t) })
}

// TestConformanceOverGRPC runs the suite against cloudvm served over real
// gRPC (go-plugin's in-process test connection).
func TestConformanceOverGRPC(t *testing.T) {
	conformance.Run(t, func(t *testing.T) plugins.Launcher {
		client, _ := plugin.TestPluginGRPCConn(t, false, goplugin.PluginSet(conformanceLauncher(t), zap.NewNop()))
		t.Cleanup(func() { _ = client.Close() })
		raw, err := client.Dispense(goplugin.PluginName)
		if err != nil {
			t.Fatalf("Dispense: %v", err)
		}
		return raw.(plugins.Launcher)
	})
}

// TestConformanceRecover runs the suite's recovery check: an attempt the
// first launcher started is reattached by a second on the same state
// directory and owner, as after a daemon restart (ranks detached, output
// followed from then on, the result read again once it has ended).
func TestConformanceRecover(t *testing.T) {
	var first *Launcher
	conformance.RunRecover(t, func(t *testing.T) plugins.Launcher {
		if first == nil {
			first = conformanceLauncher(t)
			return first
		}
		return newLauncher(t, Options{Logger: zap.NewNop(), Types: []string{"loc.wide"}, NoTelemetryForward: true, StateDir: first.o.StateDir, Owner: first.o.Owner})
	})
}
