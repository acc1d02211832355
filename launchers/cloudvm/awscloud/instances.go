package awscloud

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

// Provision launches req with RunInstances (MinCount = MaxCount = Count).
func (p *Provider) Provision(ctx context.Context, req provider.ProvisionRequest) ([]provider.Instance, error) {
	if !p.Has(req.Type) {
		return nil, fmt.Errorf("provision: type %q is not among %v", req.Type, p.o.Types)
	}
	if p.o.Image == "" {
		return nil, fmt.Errorf("provision: %w: no AMI (cloud.image)", provider.ErrUnavailable)
	}
	in := &ec2.RunInstancesInput{
		ImageId: aws.String(p.o.Image), InstanceType: types.InstanceType(req.Type),
		MinCount: aws.Int32(int32(req.Count)), MaxCount: aws.Int32(int32(req.Count)),
		ClientToken: aws.String(req.Token), UserData: aws.String(userData(req.Boot, req.OrphanTimeout)),
		InstanceInitiatedShutdownBehavior: types.ShutdownBehaviorTerminate, // the orphan watchdog's halt ends it
		Placement:                         &types.Placement{AvailabilityZone: aws.String(req.Zone)},
		MetadataOptions:                   &types.InstanceMetadataOptionsRequest{HttpTokens: types.HttpTokensStateRequired, HttpEndpoint: types.InstanceMetadataEndpointStateEnabled},
		TagSpecifications:                 []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: ec2Tags(req.Tags)}},
	}
	if s := p.o.Subnets[req.Zone]; s != "" {
		in.SubnetId = aws.String(s)
	}
	if p.o.KeyName != "" {
		in.KeyName = aws.String(p.o.KeyName)
	}
	if p.o.InstanceProfile != "" {
		in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Name: aws.String(p.o.InstanceProfile)}
	}
	if len(p.o.SecurityGroups) > 0 {
		in.SecurityGroupIds = p.o.SecurityGroups
	}
	if req.Market == provider.Spot {
		so := &types.SpotMarketOptions{SpotInstanceType: types.SpotInstanceTypeOneTime, InstanceInterruptionBehavior: types.InstanceInterruptionBehaviorTerminate}
		if req.MaxPriceUSD > 0 {
			so.MaxPrice = aws.String(strconv.FormatFloat(req.MaxPriceUSD, 'f', -1, 64))
		}
		in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot, SpotOptions: so}
	}
	out, err := p.ec2.RunInstances(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("run %d %s (%s) in %s: %w", req.Count, req.Type, req.Market, req.Zone, classify(err))
	}
	var insts []provider.Instance
	for _, i := range out.Instances {
		insts = append(insts, instance(i))
	}
	p.log.Info("instances launched", zap.Int("count", len(insts)), zap.String("type", req.Type), zap.String("zone", req.Zone), zap.String("market", req.Market))
	return insts, nil
}

func ec2Tags(m map[string]string) []types.Tag {
	keys := slices.Sorted(maps.Keys(m))
	var out []types.Tag
	for _, k := range keys {
		out = append(out, types.Tag{Key: aws.String(k), Value: aws.String(m[k])})
	}
	return out
}

// instance converts an EC2 instance.
func instance(i types.Instance) provider.Instance {
	in := provider.Instance{ID: aws.ToString(i.InstanceId), Type: string(i.InstanceType), Market: provider.OnDemand,
		Addr: aws.ToString(i.PrivateIpAddress), Launched: aws.ToTime(i.LaunchTime), Tags: map[string]string{}}
	if i.State != nil {
		in.State = string(i.State.Name)
	}
	if i.Placement != nil {
		in.Zone = aws.ToString(i.Placement.AvailabilityZone)
	}
	if i.InstanceLifecycle == types.InstanceLifecycleTypeSpot {
		in.Market = provider.Spot
	}
	for _, t := range i.Tags {
		in.Tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return in
}

// WaitReady waits with the SDK's running waiter (which rides out the
// InvalidInstanceID.NotFound of instances launched a moment ago).
func (p *Provider) WaitReady(ctx context.Context, ids []string) ([]provider.Instance, error) {
	maxWait := 10 * time.Minute
	if dl, ok := ctx.Deadline(); ok {
		maxWait = time.Until(dl)
	}
	w := ec2.NewInstanceRunningWaiter(p.ec2, func(o *ec2.InstanceRunningWaiterOptions) {
		o.MinDelay, o.MaxDelay = p.o.WaitPoll, max(p.o.WaitPoll, 30*time.Second)
	})
	out, err := w.WaitForOutput(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids}, maxWait)
	if err != nil {
		return nil, fmt.Errorf("wait for %v to run: %w", ids, classify(err))
	}
	var insts []provider.Instance
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			insts = append(insts, instance(i))
		}
	}
	return insts, nil
}

// List returns the pending and running instances with every tag of tags.
func (p *Provider) List(ctx context.Context, tags map[string]string) ([]provider.Instance, error) {
	filters := []types.Filter{{Name: aws.String("instance-state-name"), Values: []string{"pending", "running"}}}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		filters = append(filters, types.Filter{Name: aws.String("tag:" + k), Values: []string{tags[k]}})
	}
	var out []provider.Instance
	pg := ec2.NewDescribeInstancesPaginator(p.ec2, &ec2.DescribeInstancesInput{Filters: filters})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("describe instances: %w", classify(err))
		}
		for _, r := range page.Reservations {
			for _, i := range r.Instances {
				out = append(out, instance(i))
			}
		}
	}
	return out, nil
}

// Terminate ends the instances; an unknown id is no error. EC2 refuses a
// whole batch that names an unknown id (InvalidInstanceID.NotFound, naming
// them): the others are terminated in a second request. (An id EC2 does not
// know yet, launched a moment ago, is left to cloudvm's reaper.)
func (p *Provider) Terminate(ctx context.Context, ids []string) error {
	for len(ids) > 0 {
		_, err := p.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
		if err = classify(err); err == nil {
			return nil
		}
		if !errors.Is(err, provider.ErrNotFound) {
			return fmt.Errorf("terminate %v: %w", ids, err)
		}
		if len(ids) == 1 {
			return nil // gone
		}
		rest := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return strings.Contains(err.Error(), id) })
		if len(rest) == len(ids) { // it names none of them: one at a time
			var errs []error
			for _, id := range ids {
				errs = append(errs, p.Terminate(ctx, []string{id}))
			}
			return errors.Join(errs...)
		}
		p.log.Info("terminate: EC2 does not know some of the instances; terminating the others", zap.Strings("unknown", slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(rest, id) })))
		ids = rest
	}
	return nil
}
