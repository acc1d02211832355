package gcecloud

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/internal/gceemu"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/cloudvmtest"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/plugins/conformance"
	"github.com/scavenger-ml/scavenger/plugins/goplugin"
)

// TestConformance runs the launcher suite against cloudvm over this
// provider over the emulation: every subtest inserts its own instances
// (e2-standard-8, whose 4 slots take the suite's ranks on one machine).
func TestConformance(t *testing.T) {
	e := emulate(t)
	conformance.Run(t, func(t *testing.T) plugins.Launcher {
		return cloudvmtest.Launcher(t, e.prov, zap.NewNop(), "e2-standard-8")
	})
}

// TestConformanceOverGRPC runs the suite against it served over real gRPC.
func TestConformanceOverGRPC(t *testing.T) {
	e := emulate(t)
	conformance.Run(t, func(t *testing.T) plugins.Launcher {
		client, _ := plugin.TestPluginGRPCConn(t, false, goplugin.PluginSet(cloudvmtest.Launcher(t, e.prov, zap.NewNop(), "e2-standard-8"), zap.NewNop()))
		t.Cleanup(func() { _ = client.Close() })
		raw, err := client.Dispense(goplugin.PluginName)
		if err != nil {
			t.Fatalf("Dispense: %v", err)
		}
		return raw.(plugins.Launcher)
	})
}

// TestWorkersOnEmulatedGCE runs cloudvm over this provider over the
// emulation: with us-central1-a exhausted and the first requests rate
// limited, a 2-worker spot attempt lands in us-central1-b, its workers run
// on the emulated instances (real machines), and a preemption, seen in the
// metadata server's instance/preempted, reaches them as the pre-emption
// signal; spot is then blocklisted where it failed.
func TestWorkersOnEmulatedGCE(t *testing.T) {
	e := emulate(t)
	l := cloudvmtest.Launcher(t, e.prov, zaptest.NewLogger(t), "e2-standard-2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.emu.SetFaults(gceemu.Faults{NoCapacity: []string{"us-central1-a"}, Throttle: 2})
	var out cloudvmtest.Lines
	spec := conformance.ShellSpec(t, 2, `trap 'echo "pre-empted on $(hostname)"; exit 0' USR1; echo "up on $(hostname)"; while :; do sleep 0.05; done`, out.Add)
	spec.Config.Market = provider.Spot
	h, err := l.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var machines []string
	for _, in := range e.emu.Instances() {
		if in.State != "" {
			machines = append(machines, in.ID)
			if in.Zone != "us-central1-b" || in.Market != provider.Spot {
				t.Errorf("emulated instance %+v: want spot in us-central1-b", in)
			}
		}
	}
	if len(machines) != 2 {
		t.Fatalf("emulated instances %+v: want 2", e.emu.Instances())
	}
	for out.Count("up on") < 2 {
		time.Sleep(20 * time.Millisecond)
	}
	cloudvmtest.Preempted(t, ctx, l, h, &out, 2, 0.067006, func() error { return e.back.Interrupt(machines[0], 30*time.Second) })
}
