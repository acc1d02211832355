package ec2emu

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http/httptest"
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

const userData = "#cloud-config\nssh_authorized_keys:\n  - ssh-ed25519 AAAA client\nssh_keys:\n  ed25519_private: |\n    -----BEGIN OPENSSH PRIVATE KEY-----\n    abc\n    -----END OPENSSH PRIVATE KEY-----\n  ed25519_public: ssh-ed25519 BBBB host\n"

// TestWithTheSDK drives the emulation with the real AWS SDK: a spot
// RunInstances with tags, user data and a client token (repeated: the same
// instances), the emulated faults, tag and state filters, termination and
// spot prices — the SDK's deserialisers accept every answer.
func TestWithTheSDK(t *testing.T) {
	back := &fakeBackend{ended: map[string]time.Time{}}
	e, err := New(Options{Backend: back, Types: map[string]string{"c6i.large": "small"}, Zones: []string{"z-a", "z-b"}, BackendZones: []string{"a", "b"},
		SpotPrices: map[string]map[string]float64{"c6i.large": {"z-a": 0.03, "z-b": 0.04}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	defer srv.Close()
	c := ec2.New(ec2.Options{BaseEndpoint: aws.String(srv.URL), Region: "us-east-1", Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", "")})
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
	apiCode := func(err error) string {
		var ae smithy.APIError
		if errors.As(err, &ae) {
			return ae.ErrorCode()
		}
		return fmt.Sprint(err)
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
