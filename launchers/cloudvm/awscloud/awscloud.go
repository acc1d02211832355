// Package awscloud is cloudvm's "aws" provider: EC2 through the AWS SDK for
// Go v2 (service/ec2). RunInstances launches on-demand or spot instances
// (market options, one-time spot, terminate on interruption) with the
// launcher's tags, an idempotency token (ClientToken), IMDSv2 required and
// cloud-init user data that installs the pool's SSH keys;
// DescribeInstances with the running waiter waits for them;
// DescribeInstances with tag filters lists them; TerminateInstances ends
// them; DescribeSpotPriceHistory gives the live spot prices. On-demand
// prices, and the GPUs that make a type's slots, come from the price
// catalog (optimizer/price). Credentials and the region come from the
// SDK's standard chain (environment, shared config, instance role) unless
// Options names a region.
//
// The SDK's retries are off: cloudvm retries throttling and internal
// errors itself, with the same token and with jitter, and fails over on
// capacity and quota errors, which this package tells apart (classify).
// TerminateInstances refuses a whole batch that names an unknown instance:
// Terminate then leaves out the ids EC2 names and terminates the rest. A
// spot instance is billed at the spot price history over its life
// (SpotPriceHistory).
//
// It was tested here only against an emulation of the EC2 Query API
// (internal/ec2emu) whose instances are local namespace machines; see the
// README for what real use needs (an AMI with sshd, python and the
// training stack; subnets; a security group open to the launcher's SSH;
// a checkpoint directory on shared storage).
package awscloud

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/optimizer/price"
)

// DefaultMetadata is the instance metadata service as an EC2 instance reaches it.
const DefaultMetadata = "http://169.254.169.254"

// Options configure the provider.
type Options struct {
	// Logger is required; the provider names its logger "aws".
	Logger *zap.Logger
	// Region is the region (default: the SDK's, from AWS_REGION or the shared config).
	Region string
	// Zones are the availability zones to use; Subnets the subnet of each
	// (by zone; without one, the zone's default subnet).
	Zones   []string
	Subnets map[string]string
	// Types are the instance types offered; each must be in Catalog, which
	// gives its on-demand price and GPUs (its slots; 1 without GPUs).
	Types   []string
	Catalog *price.Catalog
	// Image is the AMI the instances boot; required to provision.
	Image string
	// KeyName, InstanceProfile and SecurityGroups are passed to RunInstances when set.
	KeyName         string
	InstanceProfile string
	SecurityGroups  []string
	// Endpoint overrides the EC2 endpoint (an emulation, a VPC endpoint).
	Endpoint string
	// Metadata is the metadata service's base URL as the instances reach
	// it (default DefaultMetadata).
	Metadata string
	// Credentials, when set, replace the SDK's standard chain.
	Credentials aws.CredentialsProvider
	// HTTPClient, when set, is the SDK's HTTP client.
	HTTPClient *http.Client
	// WaitPoll is the running waiter's shortest delay between describes
	// (default 1 s; it backs off to 30 s).
	WaitPoll time.Duration
}

// Provider is the aws provider. It implements provider.Provider.
type Provider struct {
	provider.Catalogued
	o   Options
	log *zap.Logger
	ec2 *ec2.Client
}

var (
	_ provider.Provider       = (*Provider)(nil)
	_ provider.PriceHistorian = (*Provider)(nil)
)

// New loads the SDK's configuration and checks the types against the catalog.
func New(ctx context.Context, o Options) (*Provider, error) {
	if o.Logger == nil || o.Catalog == nil || len(o.Zones) == 0 || len(o.Types) == 0 {
		return nil, errors.New("new aws provider: Options.Logger, Catalog, Zones and Types are required")
	}
	if o.Metadata == "" {
		o.Metadata = DefaultMetadata
	}
	if o.WaitPoll <= 0 {
		o.WaitPoll = time.Second
	}
	var opts []func(*config.LoadOptions) error
	if o.Region != "" {
		opts = append(opts, config.WithRegion(o.Region))
	}
	if o.Credentials != nil {
		opts = append(opts, config.WithCredentialsProvider(o.Credentials))
	}
	if o.HTTPClient != nil {
		opts = append(opts, config.WithHTTPClient(o.HTTPClient))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("new aws provider: %w: load the SDK's configuration: %w", provider.ErrUnavailable, err)
	}
	if cfg.Region == "" {
		return nil, fmt.Errorf("new aws provider: %w: no region (set cloud.region, or AWS_REGION)", provider.ErrUnavailable)
	}
	p := &Provider{o: o, log: o.Logger.Named("aws")}
	p.ec2 = ec2.NewFromConfig(cfg, func(eo *ec2.Options) {
		if o.Endpoint != "" {
			eo.BaseEndpoint = aws.String(o.Endpoint)
		}
		eo.Retryer = aws.NopRetryer{} // cloudvm retries, with the same token
	})
	if p.Catalogued, err = provider.NewCatalogued(o.Catalog, o.Types, cfg.Region, o.Zones, true); err != nil {
		return nil, fmt.Errorf("new aws provider: the price catalog (cloud.catalog) must hold every type with its on-demand price in %s: %w", cfg.Region, err)
	}
	return p, nil
}

// Name returns "aws".
func (p *Provider) Name() string { return "aws" }

// Metadata is the metadata service's base URL.
func (p *Provider) Metadata() string { return p.o.Metadata }

// Billing is the catalog's rule for aws, else EC2's for Linux: per
// second, a minute at least.
func (p *Provider) Billing() provider.Billing {
	return provider.CatalogBilling(p.o.Catalog, "aws", provider.Billing{Granularity: time.Second, Minimum: time.Minute})
}

// Prices returns the catalog's on-demand prices and the latest spot price
// of each type in each zone (DescribeSpotPriceHistory, Linux/UNIX).
func (p *Provider) Prices(ctx context.Context, names []string) ([]provider.Price, error) {
	var out []provider.Price
	now := time.Now().UTC()
	var its []types.InstanceType
	for _, n := range names {
		out = append(out, provider.Price{Type: n, Market: provider.OnDemand, USDPerHour: p.OnDemandUSD[n], At: now})
		its = append(its, types.InstanceType(n))
	}
	latest := map[[2]string]provider.Price{}
	pg := ec2.NewDescribeSpotPriceHistoryPaginator(p.ec2, &ec2.DescribeSpotPriceHistoryInput{InstanceTypes: its,
		ProductDescriptions: []string{"Linux/UNIX"}, StartTime: aws.Time(now)})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("describe spot price history: %w", classify(err))
		}
		for _, sp := range page.SpotPriceHistory {
			zone := aws.ToString(sp.AvailabilityZone)
			if !slices.Contains(p.o.Zones, zone) {
				continue
			}
			v, err := strconv.ParseFloat(aws.ToString(sp.SpotPrice), 64)
			if err != nil {
				continue
			}
			k := [2]string{string(sp.InstanceType), zone}
			if ts := aws.ToTime(sp.Timestamp); ts.After(latest[k].At) || latest[k].At.IsZero() {
				latest[k] = provider.Price{Type: k[0], Zone: zone, Market: provider.Spot, USDPerHour: v, At: ts}
			}
		}
		if len(page.SpotPriceHistory) == 0 {
			break
		}
	}
	for _, n := range names {
		for _, z := range p.o.Zones {
			if sp, ok := latest[[2]string{n, z}]; ok {
				out = append(out, sp)
			}
		}
	}
	return out, nil
}

// SpotPriceHistory returns the spot prices of typ in zone in effect from
// from to to (DescribeSpotPriceHistory, Linux/UNIX), oldest first.
func (p *Provider) SpotPriceHistory(ctx context.Context, typ, zone string, from, to time.Time) ([]provider.Price, error) {
	var out []provider.Price
	pg := ec2.NewDescribeSpotPriceHistoryPaginator(p.ec2, &ec2.DescribeSpotPriceHistoryInput{InstanceTypes: []types.InstanceType{types.InstanceType(typ)},
		AvailabilityZone: aws.String(zone), ProductDescriptions: []string{"Linux/UNIX"}, StartTime: aws.Time(from), EndTime: aws.Time(to)})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("spot price history of %s in %s: %w", typ, zone, classify(err))
		}
		for _, sp := range page.SpotPriceHistory {
			if v, err := strconv.ParseFloat(aws.ToString(sp.SpotPrice), 64); err == nil && aws.ToString(sp.AvailabilityZone) == zone {
				out = append(out, provider.Price{Type: typ, Zone: zone, Market: provider.Spot, USDPerHour: v, At: aws.ToTime(sp.Timestamp)})
			}
		}
		if len(page.SpotPriceHistory) == 0 {
			break
		}
	}
	slices.SortStableFunc(out, func(a, b provider.Price) int { return a.At.Compare(b.At) })
	return out, nil
}

// classify wraps an SDK error in the provider's error class.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return fmt.Errorf("%w: %w", provider.ErrInternal, err) // the request did not get an answer
	}
	code := ae.ErrorCode()
	switch {
	case code == "InvalidInstanceID.NotFound":
		return fmt.Errorf("%w: %w", provider.ErrNotFound, err)
	case code == "VcpuLimitExceeded" || code == "InstanceLimitExceeded" || code == "MaxSpotInstanceCountExceeded":
		return fmt.Errorf("%w: %w", provider.ErrQuota, err)
	case strings.HasPrefix(code, "Insufficient") || code == "SpotMaxPriceTooLow" || code == "Unsupported":
		return fmt.Errorf("%w: %w", provider.ErrCapacity, err)
	case code == "RequestLimitExceeded" || strings.HasPrefix(code, "Throttling"):
		return fmt.Errorf("%w: %w", provider.ErrThrottled, err)
	case code == "InternalError" || code == "InternalFailure" || code == "ServiceUnavailable" || code == "Unavailable":
		return fmt.Errorf("%w: %w", provider.ErrInternal, err)
	case code == "AuthFailure" || code == "UnauthorizedOperation" || strings.HasPrefix(code, "InvalidClientTokenId"):
		return fmt.Errorf("%w: %w", provider.ErrUnavailable, err)
	}
	return err
}

// userData is the instances' user data: provider.CloudConfig, whose
// watchdog halts the instance; RunInstances asks for termination on an
// instance-initiated shutdown.
func userData(b provider.Boot, orphanTimeout time.Duration) string {
	return base64.StdEncoding.EncodeToString([]byte(provider.CloudConfig(b, orphanTimeout)))
}
