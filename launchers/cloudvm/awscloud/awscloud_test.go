package awscloud

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"go.uber.org/zap/zaptest"
	"go.yaml.in/yaml/v3"

	"github.com/scavenger-ml/scavenger/internal/ec2emu"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/cloudvmtest"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/optimizer/price"
)

// TestPrices checks the on-demand prices from the catalog and the spot
// prices from DescribeSpotPriceHistory.
func TestPrices(t *testing.T) {
	e := emulate(t)
	ps, err := e.prov.Prices(context.Background(), []string{"c6i.large", "c6i.xlarge"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, p := range ps {
		got[p.Type+"/"+p.Zone+"/"+p.Market] = p.USDPerHour
	}
	want := map[string]float64{"c6i.large//on-demand": 0.085, "c6i.xlarge//on-demand": 0.17, "c6i.large/us-east-1a/spot": 0.031,
		"c6i.large/us-east-1b/spot": 0.029, "c6i.xlarge/us-east-1a/spot": 0.061, "c6i.xlarge/us-east-1b/spot": 0.066}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("price %s = %g, want %g (all: %v)", k, got[k], v, got)
		}
	}
}

// TestInstanceLifecycle launches spot instances through RunInstances, with
// the emulation answering InvalidInstanceID.NotFound right after the
// launch: the same ClientToken returns the same instances, the running
// waiter rides out the NotFound, they are listed by tag, and terminated.
func TestInstanceLifecycle(t *testing.T) {
	e := emulate(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.emu.SetFaults(ec2emu.Faults{NotFoundFor: 300 * time.Millisecond})
	tags := map[string]string{provider.TagOwner: "o-" + rand.Text()[:4], provider.TagJob: "j"}
	req := provider.ProvisionRequest{Type: "c6i.large", Count: 2, Market: provider.Spot, Zone: "us-east-1b", Tags: tags, Token: "tok-" + rand.Text()[:6], Boot: cloudvmtest.Boot(t)}
	insts, err := e.prov.Provision(ctx, req)
	if err != nil || len(insts) != 2 || insts[0].Market != provider.Spot || insts[0].Zone != "us-east-1b" || insts[0].Tags[provider.TagJob] != "j" {
		t.Fatalf("Provision = %+v, %v", insts, err)
	}
	again, err := e.prov.Provision(ctx, req)
	if err != nil || len(again) != 2 || again[0].ID != insts[0].ID || again[1].ID != insts[1].ID {
		t.Fatalf("Provision with the same token = %+v, %v; want the same instances", again, err)
	}
	ids := []string{insts[0].ID, insts[1].ID}
	ready, err := e.prov.WaitReady(ctx, ids)
	if err != nil || len(ready) != 2 || ready[0].State != provider.Running || ready[0].Addr == "" {
		t.Fatalf("WaitReady = %+v, %v", ready, err)
	}
	if n := e.emu.Calls("DescribeInstances"); n < 2 {
		t.Errorf("%d DescribeInstances calls: the waiter never met the NotFound", n)
	}
	listed, err := e.prov.List(ctx, tags)
	if err != nil || len(listed) != 2 {
		t.Fatalf("List = %+v, %v", listed, err)
	}
	if err := e.prov.Terminate(ctx, ids); err != nil {
		t.Fatal(err)
	}
	if listed, _ := e.prov.List(ctx, tags); len(listed) != 0 {
		t.Fatalf("List after Terminate = %+v", listed)
	}
	if err := e.prov.Terminate(ctx, []string{"i-0000000000000dead"}); err != nil {
		t.Errorf("Terminate of an unknown id = %v, want nil", err)
	}
}

// TestErrorClasses checks how the SDK's errors are classified:
// InsufficientInstanceCapacity is a capacity error, RequestLimitExceeded
// throttling, and the SDK does not retry either itself.
func TestErrorClasses(t *testing.T) {
	e := emulate(t)
	ctx := context.Background()
	req := provider.ProvisionRequest{Type: "c6i.large", Count: 1, Market: provider.OnDemand, Zone: "us-east-1a", Token: "t-" + rand.Text()[:6], Boot: cloudvmtest.Boot(t)}
	e.emu.SetFaults(ec2emu.Faults{NoCapacity: []string{"us-east-1a"}})
	if _, err := e.prov.Provision(ctx, req); !errors.Is(err, provider.ErrCapacity) || !strings.Contains(err.Error(), "InsufficientInstanceCapacity") {
		t.Errorf("no capacity: %v, want ErrCapacity", err)
	}
	e.emu.SetFaults(ec2emu.Faults{Throttle: 1})
	if _, err := e.prov.List(ctx, nil); !errors.Is(err, provider.ErrThrottled) || !provider.Retryable(err) {
		t.Errorf("throttled: %v, want ErrThrottled", err)
	}
	if n := e.emu.Calls("RunInstances"); n != 1 {
		t.Errorf("%d RunInstances calls for one failed request: the SDK retried", n)
	}
	e.emu.SetFaults(ec2emu.Faults{})
	if _, err := e.prov.Provision(ctx, provider.ProvisionRequest{Type: "m5.large", Count: 1, Zone: "us-east-1a"}); err == nil {
		t.Error("a type outside the catalog was provisioned")
	}
	ts, err := e.prov.Types(ctx)
	var names []string
	for _, it := range ts {
		names = append(names, it.Name)
		if it.Slots < 1 {
			t.Errorf("type %s takes %d workers", it.Name, it.Slots)
		}
	}
	if err != nil || !slices.Equal(names, []string{"c6i.large", "c6i.xlarge"}) {
		t.Errorf("Types = %v, %v; want the configured c6i.large and c6i.xlarge from the catalog", names, err)
	}
}

// TestUserDataWatchdog checks the cloud-init document: the keys, and with
// an orphan timeout the watchdog written to its path and started at boot;
// its halt is a shutdown, which RunInstances turns into a termination.
func TestUserDataWatchdog(t *testing.T) {
	b := cloudvmtest.Boot(t)
	var doc struct {
		Keys       []string          `yaml:"ssh_authorized_keys"`
		SSHKeys    map[string]string `yaml:"ssh_keys"`
		WriteFiles []struct {
			Path, Permissions, Content string
		} `yaml:"write_files"`
		RunCmd [][]string `yaml:"runcmd"`
	}
	raw, err := base64.StdEncoding.DecodeString(userData(b, 90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("user data is not YAML: %v\n%s", err, raw)
	}
	if len(doc.Keys) != 1 || doc.Keys[0] != b.AuthorizedKey || doc.SSHKeys["ed25519_public"] != b.HostKeyPublic {
		t.Errorf("keys: %+v", doc)
	}
	if len(doc.WriteFiles) != 1 || doc.WriteFiles[0].Path != provider.WatchdogPath || !strings.Contains(doc.WriteFiles[0].Content, "t=90;") ||
		!strings.Contains(doc.WriteFiles[0].Content, "shutdown -h now") || len(doc.RunCmd) != 1 || !strings.Contains(strings.Join(doc.RunCmd[0], " "), provider.WatchdogPath) {
		t.Errorf("watchdog: %+v", doc)
	}
	if raw, _ := base64.StdEncoding.DecodeString(userData(b, 0)); strings.Contains(string(raw), "watchdog") {
		t.Errorf("no orphan timeout, no watchdog:\n%s", raw)
	}
}

// TestRegionalPrices: the on-demand prices are the catalog's in the
// provider's region; a region the catalog does not price is refused,
// naming those it does.
func TestRegionalPrices(t *testing.T) {
	cat, err := price.Default()
	if err != nil {
		t.Fatal(err)
	}
	creds := credentials.NewStaticCredentialsProvider("AKID", "secret", "")
	p, err := New(context.Background(), Options{Logger: zaptest.NewLogger(t), Region: "us-west-2", Zones: []string{"us-west-2a"}, Types: []string{"g4dn.12xlarge"},
		Catalog: cat, Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	if p.OnDemandUSD["g4dn.12xlarge"] != 3.912 {
		t.Errorf("on demand in us-west-2: %g", p.OnDemandUSD["g4dn.12xlarge"])
	}
	_, err = New(context.Background(), Options{Logger: zaptest.NewLogger(t), Region: "eu-north-1", Zones: []string{"eu-north-1a"}, Types: []string{"g4dn.12xlarge"},
		Catalog: cat, Credentials: creds})
	if err == nil || !strings.Contains(err.Error(), "us-east-1, us-west-2") {
		t.Errorf("a region without prices: %v", err)
	}
}
