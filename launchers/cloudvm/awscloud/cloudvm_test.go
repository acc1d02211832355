package awscloud

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/internal/cloudemu"
	"github.com/scavenger-ml/scavenger/internal/ec2emu"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/cloudvmtest"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/plugins/conformance"
)

// TestWorkersOnEmulatedEC2 runs cloudvm over this provider over the EC2
// emulation: with no capacity in us-east-1a and the first requests
// throttled, a 2-worker spot attempt lands in us-east-1b (one
// RunInstances that launched, whatever was retried), its workers run on
// the emulated instances (real machines), and a spot interruption reaches
// them as the pre-emption signal through the metadata service the
// instances reach.
func TestWorkersOnEmulatedEC2(t *testing.T) {
	e := emulate(t)
	l := cloudvmtest.Launcher(t, e.prov, zaptest.NewLogger(t), "c6i.large")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.emu.SetFaults(ec2emu.Faults{NoCapacity: []string{"us-east-1a"}, Throttle: 2, NotFoundFor: 200 * time.Millisecond})
	var out cloudvmtest.Lines
	spec := conformance.ShellSpec(t, 2, `trap 'echo "pre-empted on $(hostname)"; exit 0' USR1; echo "up on $(hostname)"; while :; do sleep 0.05; done`, out.Add)
	spec.Config.Market = provider.Spot
	h, err := l.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var insts []cloudemu.Instance
	for _, in := range e.emu.Instances() {
		if in.State != provider.Terminated {
			insts = append(insts, in)
		}
	}
	if len(insts) != 2 || insts[0].Zone != "us-east-1b" || insts[1].Zone != "us-east-1b" || insts[0].Market != provider.Spot {
		t.Fatalf("emulated instances %+v: want 2 spot in us-east-1b", insts)
	}
	for !out.Has("0: up on "+insts[0].ID) && !out.Has("0: up on "+insts[1].ID) {
		time.Sleep(20 * time.Millisecond)
	}
	// us-east-1a had no capacity and us-east-1b reclaimed the instance.
	cloudvmtest.Preempted(t, ctx, l, h, &out, 2, 0.085, func() error { return e.back.Interrupt(insts[0].ID, 5*time.Second) })
}
