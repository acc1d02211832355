package ec2emu

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/scavenger-ml/scavenger/internal/cloudemu"
)

// fakeBackend launches nothing: it records requests and makes up instances.
type fakeBackend struct {
	mu    sync.Mutex
	reqs  []cloudemu.Launch
	ended map[string]time.Time
	n     int
}

func (f *fakeBackend) Launch(_ context.Context, req cloudemu.Launch) ([]cloudemu.Machine, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	var out []cloudemu.Machine
	for range req.Count {
		f.n++
		out = append(out, cloudemu.Machine{ID: fmt.Sprintf("i-%017d", f.n), Addr: "192.0.2.1", Launched: time.Now().UTC()})
	}
	return out, nil
}

func (f *fakeBackend) Terminate(_ context.Context, ids []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		f.ended[id] = time.Now()
	}
	return nil
}

func (f *fakeBackend) Ended(id string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ended[id]
}

// serve serves an emulation of c6i.large (the fake backend's "small") in
// the zones of spot (z-a, z-b: the backend's a, b) at those spot prices,
// and returns it, its backend and an SDK client pointed at it.
func serve(t *testing.T, spot map[string]float64) (*Emulator, *fakeBackend, *ec2.Client) {
	t.Helper()
	back := &fakeBackend{ended: map[string]time.Time{}}
	zones := slices.Sorted(maps.Keys(spot))
	var backZones []string
	for _, z := range zones {
		backZones = append(backZones, strings.TrimPrefix(z, "z-"))
	}
	e, err := New(Options{Backend: back, Types: map[string]string{"c6i.large": "small"}, Zones: zones, BackendZones: backZones,
		SpotPrices: map[string]map[string]float64{"c6i.large": spot}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return e, back, ec2.New(ec2.Options{BaseEndpoint: aws.String(srv.URL), Region: "us-east-1", Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", "")})
}

// apiCode is the EC2 error code of err, or err as text.
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return fmt.Sprint(err)
}

const userData = "#cloud-config\nssh_authorized_keys:\n  - ssh-ed25519 AAAA client\nssh_keys:\n  ed25519_private: |\n    -----BEGIN OPENSSH PRIVATE KEY-----\n    abc\n    -----END OPENSSH PRIVATE KEY-----\n  ed25519_public: ssh-ed25519 BBBB host\n"

// TestWithTheSDK drives the emulation with the real AWS SDK: a spot
// RunInstances with tags, user data and a client token (repeated: the same
// instances), the emulated faults, tag and state filters, termination and
// spot prices — the SDK's deserialisers accept every answer.
func TestWithTheSDK(t *testing.T) {
	e, back, c := serve(t, map[string]float64{"z-a": 0.03, "z-b": 0.04})
	ctx := context.Background()
	in := &ec2.RunInstancesInput{ImageId: aws.String("ami-1"), InstanceType: "c6i.large", MinCount: aws.Int32(2), MaxCount: aws.Int32(2),
		ClientToken: aws.String("tok"), Placement: &types.Placement{AvailabilityZone: aws.String("z-b")},
		UserData:              aws.String(base64.StdEncoding.EncodeToString([]byte(userData))),
		InstanceMarketOptions: &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot},
		TagSpecifications:     []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: []types.Tag{{Key: aws.String("job"), Value: aws.String("j")}}}}}
	out, err := c.RunInstances(ctx, in)
	if err != nil || len(out.Instances) != 2 || out.Instances[0].InstanceLifecycle != types.InstanceLifecycleTypeSpot {
		t.Fatalf("RunInstances = %+v, %v", out, err)
	}
	again, err := c.RunInstances(ctx, in)
	if err != nil || aws.ToString(again.Instances[0].InstanceId) != aws.ToString(out.Instances[0].InstanceId) || len(back.reqs) != 1 {
		t.Fatalf("the same token launched again: %+v, %v (%d backend requests)", again, err, len(back.reqs))
	}
	if r := back.reqs[0]; r.Zone != "b" || r.Market != cloudemu.Spot || r.Tags["job"] != "j" || r.Keys.HostKeyPublic != "ssh-ed25519 BBBB host" {
		t.Errorf("backend request %+v", r)
	}
	e.SetFaults(Faults{NoCapacity: []string{"z-a"}, Throttle: 1, NotFoundFor: time.Hour})
	if _, err := c.DescribeSpotPriceHistory(ctx, &ec2.DescribeSpotPriceHistoryInput{}); apiCode(err) != "RequestLimitExceeded" {
		t.Errorf("throttled call: %v", err)
	}
	in.ClientToken, in.Placement.AvailabilityZone = aws.String("tok2"), aws.String("z-a")
	if _, err := c.RunInstances(ctx, in); apiCode(err) != "InsufficientInstanceCapacity" {
		t.Errorf("RunInstances in a zone without capacity: %v", err)
	}
	ids := []string{aws.ToString(out.Instances[0].InstanceId), aws.ToString(out.Instances[1].InstanceId)}
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids}); apiCode(err) != "InvalidInstanceID.NotFound" {
		t.Errorf("describe right after the launch: %v", err)
	}
	e.SetFaults(Faults{})
	filter := func(name string, v ...string) types.Filter { return types.Filter{Name: aws.String(name), Values: v} }
	d, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{filter("tag:job", "j"), filter("instance-state-name", "pending", "running")}})
	if err != nil || len(d.Reservations) != 1 || len(d.Reservations[0].Instances) != 2 {
		t.Fatalf("DescribeInstances by tag = %+v, %v", d, err)
	}
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids[:1]}); err != nil {
		t.Fatal(err)
	}
	d, _ = c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{filter("instance-state-name", "pending", "running")}})
	if len(d.Reservations) != 1 || len(d.Reservations[0].Instances) != 1 || aws.ToString(d.Reservations[0].Instances[0].InstanceId) != ids[1] {
		t.Errorf("live instances after terminating %s: %+v", ids[0], d.Reservations)
	}
	sp, err := c.DescribeSpotPriceHistory(ctx, &ec2.DescribeSpotPriceHistoryInput{InstanceTypes: []types.InstanceType{"c6i.large"}})
	if err != nil || len(sp.SpotPriceHistory) != 2 || aws.ToString(sp.SpotPriceHistory[0].SpotPrice) != "0.030000" {
		t.Errorf("spot prices = %+v, %v", sp, err)
	}
	if _, err := c.RebootInstances(ctx, &ec2.RebootInstancesInput{InstanceIds: ids}); apiCode(err) != "InvalidAction" {
		t.Errorf("an action the emulation does not answer: %v", err)
	}
}

// TestQuotasBatchesAndHistory checks the faults a new account meets (a
// quota error per market), the running waiter's throttling, a
// TerminateInstances batch with unknown ids refused whole with EC2's
// message, and the spot price history over a window.
func TestQuotasBatchesAndHistory(t *testing.T) {
	e, back, c := serve(t, map[string]float64{"z-a": 0.03})
	ctx := context.Background()
	apiMsg := func(err error) string { // the code and the message
		var ae smithy.APIError
		if errors.As(err, &ae) {
			return ae.ErrorCode() + ": " + ae.ErrorMessage()
		}
		return fmt.Sprint(err)
	}
	run := func(market types.MarketType) (*ec2.RunInstancesOutput, error) {
		in := &ec2.RunInstancesInput{ImageId: aws.String("ami-1"), InstanceType: "c6i.large", MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
			Placement: &types.Placement{AvailabilityZone: aws.String("z-a")}, UserData: aws.String(base64.StdEncoding.EncodeToString([]byte(userData)))}
		if market == types.MarketTypeSpot {
			in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: market}
		}
		return c.RunInstances(ctx, in)
	}
	e.SetFaults(Faults{Refuse: map[string]string{"spot": "MaxSpotInstanceCountExceeded"}})
	if _, err := run(types.MarketTypeSpot); !strings.HasPrefix(apiMsg(err), "MaxSpotInstanceCountExceeded: ") {
		t.Errorf("spot refused: %v", apiMsg(err))
	}
	out, err := run("")
	if err != nil {
		t.Fatalf("on demand is not refused: %v", err)
	}
	id := aws.ToString(out.Instances[0].InstanceId)
	e.SetFaults(Faults{ThrottleWait: 1})
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil {
		t.Errorf("a describe by filter is not the waiter's: %v", err)
	}
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}}); !strings.HasPrefix(apiMsg(err), "RequestLimitExceeded") {
		t.Errorf("the waiter's describe: %v", apiMsg(err))
	}
	_, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id, "i-0000000000000dead", "i-0000000000000beef"}})
	if got := apiMsg(err); got != "InvalidInstanceID.NotFound: The instance IDs 'i-0000000000000dead, i-0000000000000beef' do not exist" {
		t.Errorf("a batch with unknown ids: %s", got)
	}
	if !back.Ended(id).IsZero() {
		t.Error("a refused batch terminated its known instance")
	}
	before := time.Now().UTC()
	time.Sleep(5 * time.Millisecond)
	e.SetSpotPrice("c6i.large", "z-a", 0.05)
	sp, err := c.DescribeSpotPriceHistory(ctx, &ec2.DescribeSpotPriceHistoryInput{InstanceTypes: []types.InstanceType{"c6i.large"}, StartTime: aws.Time(before)})
	var got []string
	for _, p := range sp.SpotPriceHistory {
		got = append(got, aws.ToString(p.SpotPrice))
	}
	if err != nil || strings.Join(got, " ") != "0.050000 0.030000" {
		t.Errorf("history since before the change: %v, %v; want the new price and the one in effect at the start", got, err)
	}
}
