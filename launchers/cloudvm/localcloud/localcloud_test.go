package localcloud

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/scavenger-ml/scavenger/internal/nsmachine"
	"github.com/scavenger-ml/scavenger/internal/subreaper"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/notice"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/optimizer/price"
)

// keys are a client key and a host key for the instances of a test.
type keys struct{ provider.Keys }

func newKeys(t *testing.T) keys {
	t.Helper()
	k, err := provider.NewKeys()
	if err != nil {
		t.Fatal(err)
	}
	return keys{k}
}

// up provisions the one instance of req (its Boot the keys') and waits
// for it to run.
func (k keys) up(t *testing.T, ctx context.Context, c *Cloud, req provider.ProvisionRequest) provider.Instance {
	t.Helper()
	req.Count, req.Boot = 1, k.Boot
	insts, err := c.Provision(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	ready, err := c.WaitReady(ctx, []string{insts[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	return ready[0]
}

// dial connects to inst over SSH, checking its host key.
func (k keys) dial(t *testing.T, inst provider.Instance) *gossh.Client {
	t.Helper()
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(known, []byte(knownhosts.Line([]string{inst.Addr + ":22"}, k.HostKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hk, err := knownhosts.New(known)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gossh.Dial("tcp", inst.Addr+":22", &gossh.ClientConfig{User: "root", Auth: []gossh.AuthMethod{gossh.PublicKeys(k.Signer)},
		HostKeyCallback: hk, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("ssh %s: %v", inst.Addr, err)
	}
	return c
}

func run(t *testing.T, c *gossh.Client, cmd string) string {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return strings.TrimSpace(string(out))
}

// openCloud opens a local cloud in a temporary directory; the cleanup
// destroys it and checks that nothing of it is left.
func openCloud(t *testing.T, cat *price.Catalog) *Cloud {
	t.Helper()
	return openCloudWith(t, Options{Catalog: cat, Ephemeral: true})
}

// openCloudWith opens a cloud with o in a directory of the test's, and
// destroys it when the test ends.
func openCloudWith(t *testing.T, o Options) *Cloud {
	t.Helper()
	if err := nsmachine.Check(true); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	if err := subreaper.Become(); err != nil {
		t.Fatal(err)
	}
	o.Logger, o.Dir = zaptest.NewLogger(t), t.TempDir()
	c, err := Open(context.Background(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Destroy(context.Background()); err != nil {
			t.Errorf("Destroy: %v", err)
		}
		if left := c.Leftovers(); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
		if c.st.Bridge.Exists() || nsmachine.CgroupExists(c.cgroupParent()) {
			t.Errorf("bridge %s or cgroup %s left", c.st.Bridge.Name, c.cgroupParent())
		}
		subreaper.ReapOrphans()
	})
	return c
}

// TestInstances provisions a spot and an on-demand instance, checks the
// token's idempotency, what runs inside (hostname, sshd as PID 1, the CPU
// quota of its type, its metadata read through its SSH connection), and
// that an interrupted spot instance shows the notices and is terminated
// when the notice runs out.
func TestInstances(t *testing.T) {
	c := openCloud(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := newKeys(t)
	tags := map[string]string{provider.TagJob: "j1"}
	spot, err := c.Provision(ctx, provider.ProvisionRequest{Type: "loc.half", Count: 1, Market: provider.Spot, Zone: "loc-a", Tags: tags, Token: "t1", Boot: k.Boot})
	if err != nil || len(spot) != 1 {
		t.Fatalf("Provision spot: %v, %v", spot, err)
	}
	again, err := c.Provision(ctx, provider.ProvisionRequest{Type: "loc.half", Count: 1, Market: provider.Spot, Zone: "loc-a", Tags: tags, Token: "t1", Boot: k.Boot})
	if err != nil || len(again) != 1 || again[0].ID != spot[0].ID {
		t.Fatalf("Provision with the same token = %v, %v; want the same instance %s", again, err, spot[0].ID)
	}
	od, err := c.Provision(ctx, provider.ProvisionRequest{Type: "loc.full", Count: 1, Market: provider.OnDemand, Zone: "loc-b", Tags: tags, Token: "t2", Boot: k.Boot})
	if err != nil {
		t.Fatal(err)
	}
	ready, err := c.WaitReady(ctx, []string{spot[0].ID, od[0].ID})
	if err != nil || len(ready) != 2 || ready[0].State != provider.Running {
		t.Fatalf("WaitReady: %v, %v", ready, err)
	}
	if l, _ := c.List(ctx, tags); len(l) != 2 {
		t.Fatalf("List = %v, want both", l)
	}
	sc := k.dial(t, ready[0])
	defer sc.Close()
	if got := run(t, sc, "hostname; cat /proc/1/comm; cat /sys/fs/cgroup/cpu$(grep :cpu: /proc/self/cgroup | cut -d: -f3)/cpu.cfs_quota_us"); got != spot[0].ID+"\nsshd\n50000" {
		t.Errorf("inside the spot instance: %q", got)
	}
	w := notice.New(notice.Options{Endpoint: c.Metadata(), Dial: sc.DialContext, Interval: 50 * time.Millisecond, Rebalance: true})
	defer w.Close()
	if n, ok, err := w.Poll(ctx); err != nil || ok {
		t.Fatalf("Poll before the interruption = %+v, %v, %v", n, ok, err)
	}
	if err := c.Interrupt(od[0].ID, time.Second); err == nil {
		t.Error("an on-demand instance was interrupted")
	}
	if err := InterruptVia(ctx, c.AdminSocket(), spot[0].ID, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	n, err := w.Wait(ctx, nil)
	if err != nil || n.Kind != notice.KindInterruption || n.Action != "terminate" || time.Until(n.Time) > 2*time.Second {
		t.Fatalf("notice %+v, %v; want a termination within 2 s", n, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if l, _ := c.List(ctx, tags); len(l) == 1 && l[0].ID == od[0].ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the interrupted instance was not terminated when its notice ran out")
		}
	}
	if err := c.Terminate(ctx, []string{od[0].ID, spot[0].ID}); err != nil {
		t.Fatal(err)
	}
	if left := c.Leftovers(); len(left) > 0 {
		t.Errorf("left after Terminate: %v", left)
	}
}

// TestOutlivesTheProcess closes the cloud with an instance running, opens
// it again and finds and terminates the instance: instances outlive the
// scavd that made them.
func TestOutlivesTheProcess(t *testing.T) {
	first := openCloudWith(t, Options{}) // not ephemeral: closed, it is a stopped scavd's
	ctx := context.Background()
	k := newKeys(t)
	insts, err := first.Provision(ctx, provider.ProvisionRequest{Type: "loc.half", Count: 1, Market: provider.OnDemand, Zone: "loc-a",
		Tags: map[string]string{provider.TagOwner: "o"}, Token: "t", Boot: k.Boot})
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	c, err := Open(ctx, Options{Logger: zaptest.NewLogger(t), Dir: first.o.Dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.List(ctx, map[string]string{provider.TagOwner: "o"})
	if err != nil || len(l) != 1 || l[0].ID != insts[0].ID {
		t.Fatalf("List after reopening = %v, %v", l, err)
	}
	if _, err := c.WaitReady(ctx, []string{l[0].ID}); err != nil {
		t.Fatal(err)
	}
	if err := c.Terminate(ctx, []string{l[0].ID}); err != nil {
		t.Fatal(err)
	}
	if left := c.Leftovers(); len(left) > 0 {
		t.Errorf("left: %v", left)
	}
}

// TestCapacity checks that a zone's capacity for a type turns a request
// beyond it into provider.ErrCapacity, and that spot is refused for a type
// without a spot market.
func TestCapacity(t *testing.T) {
	cat := DefaultCatalog()
	cat.Types[0].Capacity = 1
	cat.Types[1].Spot = nil
	c := openCloud(t, cat)
	ctx := context.Background()
	k := newKeys(t)
	req := provider.ProvisionRequest{Type: "loc.half", Count: 2, Market: provider.OnDemand, Zone: "loc-a", Token: "a", Boot: k.Boot}
	if _, err := c.Provision(ctx, req); !errors.Is(err, provider.ErrCapacity) {
		t.Errorf("2 instances with capacity 1: %v, want ErrCapacity", err)
	}
	req = provider.ProvisionRequest{Type: "loc.full", Count: 1, Market: provider.Spot, Zone: "loc-a", Token: "b", Boot: k.Boot}
	if _, err := c.Provision(ctx, req); !errors.Is(err, provider.ErrCapacity) {
		t.Errorf("spot without a spot market: %v, want ErrCapacity", err)
	}
}

// TestOpenSaysWhatItNeeds: a local cloud that cannot be had (here: an
// empty options) says why.
func TestOpenSaysWhatItNeeds(t *testing.T) {
	if _, err := Open(context.Background(), Options{}); err == nil || !strings.Contains(err.Error(), "required") {
		t.Errorf("Open without options = %v", err)
	}
}

// TestDeadInitFailsFast: an instance whose init (sshd) dies at once — here
// a host key sshd cannot read — fails WaitReady within seconds, not at the
// ready timeout, with what the instance's console said, and is terminated
// (its billing ends).
func TestDeadInitFailsFast(t *testing.T) {
	c := openCloud(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := newKeys(t)
	k.Boot.HostKey = []byte("not a key\n")
	insts, err := c.Provision(ctx, provider.ProvisionRequest{Type: "loc.half", Count: 1, Market: provider.OnDemand, Zone: "loc-a", Token: "dead", Boot: k.Boot})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.WaitReady(ctx, []string{insts[0].ID})
	if took := time.Since(start); err == nil || took > 10*time.Second || !strings.Contains(err.Error(), "died") || !strings.Contains(err.Error(), "sshd") {
		t.Fatalf("WaitReady = %v after %v; want a dead init named within 10 s", err, took.Round(time.Millisecond))
	}
	t.Logf("WaitReady: %v", err)
	if c.Ended(insts[0].ID).IsZero() {
		t.Error("the dead instance was not terminated")
	}
	if left := c.Leftovers(); len(left) > 0 {
		t.Errorf("left: %v", left)
	}
}

// TestWatchdogEndsAnOrphan: an instance provisioned with an orphan timeout
// stays up while an SSH connection to it is open, and ends itself (its
// watchdog signals its init) once none has been for the timeout; the
// cloud notices and terminates what is left of it.
func TestWatchdogEndsAnOrphan(t *testing.T) {
	const timeout = 2 * time.Second
	c := openCloud(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := newKeys(t)
	in := k.up(t, ctx, c, provider.ProvisionRequest{Type: "loc.half", Market: provider.OnDemand, Zone: "loc-a", Token: "wd", OrphanTimeout: timeout})
	sc := k.dial(t, in)
	time.Sleep(2*timeout + 2*time.Second)
	if !c.Ended(in.ID).IsZero() {
		t.Fatal("the instance ended while its owner was connected")
	}
	if got := run(t, sc, "cat /proc/1/comm"); got != "sshd" {
		t.Errorf("init %q, want sshd", got)
	}
	_ = sc.Close()
	closed := time.Now()
	for c.Ended(in.ID).IsZero() {
		if time.Since(closed) > timeout+15*time.Second {
			t.Fatalf("the instance still runs %v after its last connection closed (orphan timeout %v)", time.Since(closed), timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("ended %v after its last connection closed (orphan timeout %v)", time.Since(closed).Round(100*time.Millisecond), timeout)
	if left := c.Leftovers(); len(left) > 0 {
		t.Errorf("left: %v", left)
	}
}

// TestGCEMetadata: the metadata service answers GCE's paths to an
// instance (the Metadata-Flavor header required, as GCE does), and the
// notice watcher in GCE's flavor sees a spot instance's preemption through
// instance/preempted.
func TestGCEMetadata(t *testing.T) {
	c := openCloud(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := newKeys(t)
	in := k.up(t, ctx, c, provider.ProvisionRequest{Type: "loc.half", Market: provider.Spot, Zone: "loc-b", Token: "gce"})
	sc := k.dial(t, in)
	defer sc.Close()
	base := strings.TrimPrefix(c.Metadata(), "http://")
	if got := run(t, sc, "curl -s -o /dev/null -w '%{http_code}' http://"+base+"/computeMetadata/v1/instance/preempted"); got != "403" {
		t.Errorf("without Metadata-Flavor: HTTP %s, want 403", got)
	}
	if got := run(t, sc, "curl -s -H 'Metadata-Flavor: Google' http://"+base+"/computeMetadata/v1/instance/zone"); got != "projects/local/zones/loc-b" {
		t.Errorf("instance/zone %q", got)
	}
	w := notice.New(notice.Options{Endpoint: c.Metadata(), Dial: sc.DialContext, Interval: 50 * time.Millisecond, Flavor: notice.FlavorGCE})
	defer w.Close()
	if n, ok, err := w.Poll(ctx); err != nil || ok {
		t.Fatalf("Poll before the preemption = %+v, %v, %v", n, ok, err)
	}
	if err := c.Interrupt(in.ID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	n, err := w.Wait(ctx, nil)
	if err != nil || n.Kind != notice.KindInterruption || time.Until(n.Time) > notice.GCEPreemptNotice {
		t.Fatalf("notice %+v, %v; want a preemption within 30 s", n, err)
	}
	if err := c.Terminate(ctx, []string{in.ID}); err != nil {
		t.Fatal(err)
	}
}
