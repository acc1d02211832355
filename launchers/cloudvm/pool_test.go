package cloudvm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/plugins/conformance"
)

// run starts spec and waits for it to end.
func run(t *testing.T, ctx context.Context, l *Launcher, spec plugins.AttemptSpec) plugins.Result {
	t.Helper()
	h, err := l.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	res, err := h.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return res
}

// instances lists the job's live instances, sorted by id.
func instances(t *testing.T, l *Launcher, job string) []provider.Instance {
	t.Helper()
	insts, err := l.o.Provider.List(context.Background(), map[string]string{provider.TagOwner: l.o.Owner, provider.TagJob: job})
	if err != nil {
		t.Fatal(err)
	}
	return insts
}

func ids(insts []provider.Instance) []string {
	var out []string
	for _, in := range insts {
		out = append(out, in.ID)
	}
	slices.Sort(out)
	return out
}

// TestPoolIsReused runs three attempts of one job: 2 workers of loc.half,
// then 1 (one instance is kept, the other released), then 2 of loc.full
// (two new instances; the old one released once the attempt started), and
// checks the instances and their charges; Release ends them all.
func TestPoolIsReused(t *testing.T) {
	l := newLauncher(t, Options{Types: []string{"loc.half", "loc.full"}, NoTelemetryForward: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := conformance.ShellSpec(t, 2, `hostname`, nil)
	spec.Config.MachineType = "loc.half"
	if res := run(t, ctx, l, spec); res.ExitCode != 0 {
		t.Fatalf("attempt 1: %+v", res)
	}
	first := instances(t, l, spec.JobID)
	if len(first) != 2 {
		t.Fatalf("attempt 1 runs on %v, want 2 instances", first)
	}
	spec.Attempt, spec.Config.Workers = 2, 1
	if res := run(t, ctx, l, spec); res.ExitCode != 0 {
		t.Fatalf("attempt 2: %+v", res)
	}
	second := instances(t, l, spec.JobID)
	if len(second) != 1 || !slices.Contains(ids(first), second[0].ID) {
		t.Fatalf("attempt 2 runs on %v, want one of %v kept", second, ids(first))
	}
	spec.Attempt, spec.Config.Workers, spec.Config.MachineType = 3, 2, "loc.full"
	if res := run(t, ctx, l, spec); res.ExitCode != 0 {
		t.Fatalf("attempt 3: %+v", res)
	}
	third := instances(t, l, spec.JobID)
	if len(third) != 2 || third[0].Type != "loc.full" || slices.Contains(ids(third), second[0].ID) {
		t.Fatalf("attempt 3 runs on %v, want 2 new loc.full", third)
	}
	if err := l.Release(ctx, spec.JobID); err != nil {
		t.Fatal(err)
	}
	if left := instances(t, l, spec.JobID); len(left) > 0 {
		t.Fatalf("after Release: %v", left)
	}
	cs, err := l.Charges(ctx, spec.JobID)
	if err != nil || len(cs) != 4 {
		t.Fatalf("Charges = %v, %v; want 4 instances", cs, err)
	}
	for _, c := range cs {
		if c.End == nil || c.USDPerHour <= 0 || c.Minimum != time.Minute || c.Market != provider.OnDemand {
			t.Errorf("charge %+v: want ended, priced on demand, with a minute's minimum", c)
		}
	}
}

// TestSpotNotice interrupts the spot instance of a running attempt: the
// workers get the pre-emption signal (they exit 0 on it), the instance is
// released, its zone's spot market is blocklisted, and the next spot
// attempt is provisioned in the other zone.
func TestSpotNotice(t *testing.T) {
	l := newLauncher(t, Options{Types: []string{"loc.half"}, NoTelemetryForward: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out output
	spec := conformance.ShellSpec(t, 1, `trap 'echo "pre-empted by $SCAV_PREEMPT_SIGNAL"; exit 0' USR1; echo ready; while :; do sleep 0.05; done`, out.add)
	spec.Config.Market = provider.Spot
	h, err := l.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	for !slices.Contains(out.all(), "0: ready") {
		time.Sleep(20 * time.Millisecond)
	}
	inst := instances(t, l, spec.JobID)[0]
	if err := testCloud(t).Interrupt(inst.ID, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	res, err := h.Wait(ctx)
	if err != nil || res.ExitCode != 0 || !slices.Contains(out.all(), "0: pre-empted by USR1") {
		t.Fatalf("Wait = %+v, %v; output %q", res, err, out.all())
	}
	t.Logf("notice to the workers' exit: %s", time.Since(began))
	for len(instances(t, l, spec.JobID)) > 0 {
		if time.Since(began) > 5*time.Second {
			t.Fatalf("the reclaimed instance %s was not released", inst.ID)
		}
		time.Sleep(20 * time.Millisecond)
	}
	caps, err := l.Capabilities(ctx)
	if err != nil || caps.Offers[0].SpotUSD == 0 {
		t.Fatalf("offers %+v, %v: want spot still offered in the other zone", caps.Offers, err)
	}
	if caps.Offers[0].MinimumBillS != 60 {
		t.Errorf("offer %+v: want the catalog's minimum bill, 60 s", caps.Offers[0])
	}
	if !l.blockSnapshot().blocked(offering{"loc.half", inst.Zone, provider.Spot}, time.Now()) {
		t.Fatalf("%s spot in %s is not blocklisted", inst.Type, inst.Zone)
	}
	spec.Attempt, spec.Command = 2, []string{"/bin/sh", "-c", "true"}
	if res := run(t, ctx, l, spec); res.ExitCode != 0 {
		t.Fatal(res)
	}
	cs, _ := l.Charges(ctx, spec.JobID)
	if len(cs) != 2 || cs[1].Zone == inst.Zone || cs[1].Market != provider.Spot {
		t.Fatalf("charges %+v: want a second spot instance in another zone than %s", cs, inst.Zone)
	}
}

// faulty is a provider that fails on request: it has no capacity in the
// zones of noCapacity; of the calls to the others, it launches and then
// loses the answer of the first (an internal error, retried) and throttles
// the second.
type faulty struct {
	provider.Provider
	mu         sync.Mutex
	calls      []provider.ProvisionRequest
	served     int // calls to zones with capacity
	noCapacity map[string]bool
}

func (f *faulty) Provision(ctx context.Context, req provider.ProvisionRequest) ([]provider.Instance, error) {
	f.mu.Lock()
	f.calls = append(f.calls, req)
	full := f.noCapacity[req.Zone]
	if !full {
		f.served++
	}
	n := f.served
	f.mu.Unlock()
	switch {
	case full:
		return nil, fmt.Errorf("InsufficientInstanceCapacity in %s: %w", req.Zone, provider.ErrCapacity)
	case n == 1:
		if _, err := f.Provider.Provision(ctx, req); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("the answer was lost: %w", provider.ErrInternal)
	case n == 2:
		return nil, fmt.Errorf("RequestLimitExceeded: %w", provider.ErrThrottled)
	}
	return f.Provider.Provision(ctx, req)
}

// TestProvisioningFailsOver checks the provisioning rules: a zone without
// capacity is blocklisted and the next zone is tried; an internal error
// after the launch and a throttled call are retried with the same token,
// which never doubles the pool.
func TestProvisioningFailsOver(t *testing.T) {
	f := &faulty{Provider: testCloud(t), noCapacity: map[string]bool{"loc-a": true}}
	l := newLauncher(t, Options{Provider: f, Types: []string{"loc.half"}, NoTelemetryForward: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := conformance.ShellSpec(t, 2, `true`, nil)
	if res := run(t, ctx, l, spec); res.ExitCode != 0 {
		t.Fatal(res)
	}
	insts := instances(t, l, spec.JobID)
	if len(insts) != 2 || insts[0].Zone != "loc-b" || insts[1].Zone != "loc-b" {
		t.Fatalf("instances %+v: want 2, in loc-b", insts)
	}
	var zones, tokens []string
	for _, c := range f.calls {
		zones, tokens = append(zones, c.Zone), append(tokens, c.Token)
	}
	if !slices.Equal(zones, []string{"loc-a", "loc-b", "loc-b", "loc-b"}) || tokens[1] != tokens[2] || tokens[2] != tokens[3] {
		t.Errorf("calls in zones %v with tokens %v: want loc-a once, then loc-b thrice with one token", zones, tokens)
	}
	if !l.blockSnapshot().blocked(offering{"loc.half", "loc-a", provider.OnDemand}, time.Now()) {
		t.Error("loc-a is not blocklisted after its capacity error")
	}
	f.noCapacity["loc-b"] = true
	spec.Attempt, spec.Config.Workers = 2, 3
	_, err := l.Start(ctx, spec)
	if !errors.Is(err, provider.ErrCapacity) || !strings.Contains(err.Error(), "0 of 1 instances") {
		t.Fatalf("Start with no capacity anywhere = %v, want ErrCapacity", err)
	}
}

// crash stops the launcher as a killed daemon would: its goroutines end,
// nothing is released.
func (l *Launcher) crash() {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.pools {
		for _, m := range p.members {
			if m.conn != nil {
				_ = m.conn.Close()
			}
		}
	}
	l.closeOnce.Do(func() {})
}

// TestNothingOutlivesACrash runs two jobs on a launcher that then "crashes"
// with their workers running: the next launcher (same owner and state
// directory) terminates the first job's instances when asked
// (StopOrphaned, as the daemon does for a job it finds lost) and its reaper
// the second's; the charges of both end.
func TestNothingOutlivesACrash(t *testing.T) {
	crashed := newLauncher(t, Options{Types: []string{"loc.half"}, NoTelemetryForward: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var jobs []string
	for i := range 2 {
		spec := conformance.ShellSpec(t, 1, `exec sleep 300`, nil)
		spec.JobID = fmt.Sprintf("%s-%d", spec.JobID, i)
		if _, err := crashed.Start(ctx, spec); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, spec.JobID)
	}
	crashed.crash()
	next, err := New(ctx, Options{Logger: crashed.o.Logger, Provider: crashed.o.Provider, StateDir: crashed.o.StateDir, Owner: crashed.o.Owner,
		Types: crashed.o.Types, AdoptGrace: time.Millisecond, ReapInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if n, err := next.StopOrphaned(ctx, plugins.RecoverSpec{JobID: jobs[0], Attempt: 1}); err != nil || n != 1 {
		t.Fatalf("StopOrphaned = %d, %v; want 1 instance", n, err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(instances(t, next, jobs[1])) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reaper did not terminate the instance of the second job")
		}
	}
	for _, job := range jobs {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			cs, err := next.Charges(ctx, job)
			if err == nil && len(cs) == 1 && cs[0].End != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("charges of %s after the crash: %+v, %v; want one, ended", job, cs, err)
			}
		}
	}
}

// brokenBoot is a provider whose instances cannot load their host key:
// their sshd exits as they boot.
type brokenBoot struct{ provider.Provider }

func (b brokenBoot) Provision(ctx context.Context, req provider.ProvisionRequest) ([]provider.Instance, error) {
	req.Boot.HostKey = []byte("not a key\n")
	return b.Provider.Provision(ctx, req)
}

// TestDeadInstanceFailsTheStartFast: an instance whose init died fails the
// start within seconds (not at the ready timeout), and its charge ends:
// the failed start's instance is released and billed until then.
func TestDeadInstanceFailsTheStartFast(t *testing.T) {
	l := newLauncher(t, Options{Provider: brokenBoot{testCloud(t)}, Types: []string{"loc.half"}, NoTelemetryForward: true, ReadyTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := conformance.ShellSpec(t, 1, `true`, nil)
	start := time.Now()
	_, err := l.Start(ctx, spec)
	if took := time.Since(start); err == nil || took > 10*time.Second {
		t.Fatalf("Start = %v after %v; want an error within 10 s", err, took)
	}
	cs, _ := l.Charges(ctx, spec.JobID)
	if len(cs) != 1 || cs[0].End == nil {
		t.Fatalf("charges %+v: want the dead instance's, ended", cs)
	}
	if insts := instances(t, l, spec.JobID); len(insts) != 0 {
		t.Errorf("instances left: %v", insts)
	}
}
