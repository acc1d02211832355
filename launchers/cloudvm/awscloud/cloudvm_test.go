package awscloud

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/internal/cloudemu"
	"github.com/scavenger-ml/scavenger/internal/ec2emu"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/plugins/conformance"
)

type lines struct {
	mu sync.Mutex
	l  []string
}

func (o *lines) add(rank int, _ plugins.Stream, s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.l = append(o.l, fmt.Sprintf("%d: %s", rank, s))
}

func (o *lines) has(s string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Contains(o.l, s)
}

// TestWorkersOnEmulatedEC2 runs cloudvm over this provider over the EC2
// emulation: with no capacity in us-east-1a and the first requests
// throttled, a 2-worker spot attempt lands in us-east-1b (one
// RunInstances that launched, whatever was retried), its workers run on
// the emulated instances (real machines), and a spot interruption reaches
// them as the pre-emption signal through the metadata service the
// instances reach.
func TestWorkersOnEmulatedEC2(t *testing.T) {
	e := emulate(t)
	l := launcherOn(t, e, "c6i.large")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.emu.SetFaults(ec2emu.Faults{NoCapacity: []string{"us-east-1a"}, Throttle: 2, NotFoundFor: 200 * time.Millisecond})
	var out lines
	spec := conformance.ShellSpec(t, 2, `trap 'echo "pre-empted on $(hostname)"; exit 0' USR1; echo "up on $(hostname)"; while :; do sleep 0.05; done`, out.add)
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
	for !out.has("0: up on "+insts[0].ID) && !out.has("0: up on "+insts[1].ID) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := e.back.Interrupt(insts[0].ID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(ctx)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
	var pre int
	for _, s := range out.l {
		if strings.Contains(s, "pre-empted on") {
			pre++
		}
	}
	if pre != 2 {
		t.Errorf("%d workers got the pre-emption signal, want 2: %q", pre, out.l)
	}
	// us-east-1a had no capacity and us-east-1b reclaimed the instance:
	// spot is blocklisted in both, on demand is what is offered.
	caps, err := l.Capabilities(ctx)
	if err != nil || len(caps.Offers) != 1 || caps.Offers[0].SpotUSD != 0 || caps.Offers[0].OnDemandUSD != 0.085 {
		t.Errorf("offers %+v, %v: want c6i.large on demand only", caps.Offers, err)
	}
}
