package awscloud

import (
	"context"
	"crypto/rand"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/aws/smithy-go"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/internal/ec2emu"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/cloudvmtest"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/plugins/conformance"
)

// The failure modes of EC2 that cost a real user money, each shown
// against the emulation, which fails as EC2 documents.

// TestTerminateBatchWithAnUnknownID: EC2 refuses a whole
// TerminateInstances batch when one id is unknown; the live instance of
// the batch must still end.
func TestTerminateBatchWithAnUnknownID(t *testing.T) {
	e := emulate(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := provider.ProvisionRequest{Type: "c6i.large", Count: 1, Market: provider.OnDemand, Zone: "us-east-1a", Token: "t-" + rand.Text()[:6], Boot: cloudvmtest.Boot(t),
		Tags: map[string]string{provider.TagOwner: "o-" + rand.Text()[:5]}}
	insts, err := e.prov.Provision(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.prov.Terminate(ctx, []string{insts[0].ID, "i-0000000000000dead", "i-0000000000000beef"}); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	if e.back.Ended(insts[0].ID).IsZero() {
		t.Fatalf("instance %s still runs: the batch's NotFound hid it", insts[0].ID)
	}
}

// TestStartRidesOutAThrottledWait: one throttled DescribeInstances of the
// running waiter must not fail the start.
func TestStartRidesOutAThrottledWait(t *testing.T) {
	e := emulate(t)
	l := cloudvmtest.Launcher(t, e.prov, zaptest.NewLogger(t), "c6i.large")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.emu.SetFaults(ec2emu.Faults{ThrottleWait: 1})
	h, err := l.Start(ctx, conformance.ShellSpec(t, 1, `true`, nil))
	if err != nil {
		t.Fatalf("Start with one throttled describe: %v", err)
	}
	if res, err := h.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
}

// TestQuotaErrorsFailOver: the quota errors a new account meets first are
// regional, so they blocklist the type in the market in every zone at once
// (one call per market, not one per zone), a spot request falls back to on
// demand, and a type that cannot be had in either is a capacity error for
// the daemon, which re-chooses among the offers (the type is no longer
// offered).
func TestQuotaErrorsFailOver(t *testing.T) {
	e := emulate(t)
	l := cloudvmtest.Launcher(t, e.prov, zaptest.NewLogger(t), "c6i.large", "c6i.xlarge")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, code := range []string{"VcpuLimitExceeded", "InstanceLimitExceeded", "MaxSpotInstanceCountExceeded"} {
		if err := classify(apiErr(code)); !errors.Is(err, provider.ErrQuota) {
			t.Errorf("%s: %v, want ErrQuota", code, err)
		}
	}
	e.emu.SetFaults(ec2emu.Faults{Refuse: map[string]string{provider.Spot: "MaxSpotInstanceCountExceeded"}})
	spec := conformance.ShellSpec(t, 1, `true`, nil)
	spec.Config.MachineType, spec.Config.Market = "c6i.large", provider.Spot
	h, err := l.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start spot without a spot quota: %v; want on demand", err)
	}
	if res, err := h.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
	if n := e.emu.Calls("RunInstances"); n != 2 {
		t.Errorf("%d RunInstances: want one spot (refused for the region) and one on demand", n)
	}
	e.emu.SetFaults(ec2emu.Faults{Refuse: map[string]string{provider.Spot: "MaxSpotInstanceCountExceeded", provider.OnDemand: "VcpuLimitExceeded"}})
	spec.Attempt, spec.Config.MachineType = 2, "c6i.xlarge"
	before := e.emu.Calls("RunInstances")
	if _, err := l.Start(ctx, spec); !errors.Is(err, provider.ErrCapacity) {
		t.Fatalf("Start with no quota in either market = %v, want a capacity error", err)
	}
	if n := e.emu.Calls("RunInstances") - before; n != 2 {
		t.Errorf("%d RunInstances: want one per market, each refused for the region", n)
	}
	caps, err := l.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range caps.Offers {
		if o.Type == "c6i.xlarge" && (o.OnDemandUSD != 0 || o.SpotUSD != 0) || o.Type == "c6i.large" && (o.OnDemandUSD == 0 || o.SpotUSD != 0) {
			t.Errorf("offer %+v: want c6i.xlarge gone and c6i.large on demand only", o)
		}
	}
}

// TestSpotBilledAtItsPriceHistory: a spot instance is billed at the spot
// price in effect each second of its life, not at its launch price.
func TestSpotBilledAtItsPriceHistory(t *testing.T) {
	e := emulate(t)
	l := cloudvmtest.Launcher(t, e.prov, zaptest.NewLogger(t), "c6i.large")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := conformance.ShellSpec(t, 1, `true`, nil)
	spec.Config.Market = provider.Spot
	h, err := l.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	cs, _ := l.Charges(ctx, spec.JobID)
	if len(cs) != 1 {
		t.Fatalf("charges %+v", cs)
	}
	zone, p0 := cs[0].Zone, cs[0].USDPerHour
	const p1 = 0.29 // ten times the launch price
	time.Sleep(300 * time.Millisecond)
	changeFrom := time.Now()
	e.emu.SetSpotPrice("c6i.large", zone, p1)
	changeTo := time.Now()
	time.Sleep(300 * time.Millisecond)
	if err := l.Release(ctx, spec.JobID); err != nil {
		t.Fatal(err)
	}
	cs, _ = l.Charges(ctx, spec.JobID)
	c := cs[0]
	if c.End == nil {
		t.Fatalf("charge %+v not ended", c)
	}
	// The change came between changeFrom and changeTo (the later, the
	// cheaper; EC2's timestamps are in milliseconds); the rounding up to
	// the minute is billed at the last price.
	life := c.End.Sub(c.Start).Seconds()
	extra := (c.Billed(life) - life) * p1 / 3600
	cost := func(change time.Time) float64 {
		return (p0*change.Sub(c.Start).Seconds()+p1*c.End.Sub(change).Seconds())/3600 + extra
	}
	lo, hi := cost(changeTo.Add(time.Millisecond)), cost(changeFrom.Add(-time.Millisecond))
	if got := c.CostUSD(time.Now()); got < lo-1e-9 || got > hi+1e-9 {
		t.Fatalf("cost %.8f, want %.8f to %.8f (launch price %g, then %g; charge %+v)", got, lo, hi, p0, p1, c)
	}
	if math.Abs(c.USD(c.Billed(life))-hi) < 1e-6 {
		t.Fatal("test is void: the launch price gives the same cost")
	}
}

// apiErr is an EC2 error answer with code.
func apiErr(code string) error { return &smithy.GenericAPIError{Code: code, Message: "emulated"} }
