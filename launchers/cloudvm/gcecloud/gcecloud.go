// Package gcecloud is cloudvm's "gce" provider: Google Compute Engine, the
// cloud the paper ran on, through Google's official Go client
// (google.golang.org/api/compute/v1). instances.insert launches an instance
// per worker slot's machine — STANDARD or SPOT provisioning, a spot VM
// deleted on preemption (instanceTerminationAction DELETE), labels naming
// the owner, job and attempt, a requestId that makes a retried insert
// idempotent (and a name derived from the request: a retry of a lost
// answer finds the instance it made) and the pool's keys and the orphan
// watchdog in cloud-init user-data metadata; zone operations are polled to
// completion (zoneOperations.wait); instances.get waits for RUNNING;
// instances.list with a label filter lists them; instances.delete ends
// them. Prices and the GPUs that make a type's slots come from the machine
// catalog (optimizer/price, provider "gce", per region); billing is per
// second with a minute at least. Spot preemptions are read from the
// metadata server's instance/preempted and instance/maintenance-event
// (notice.FlavorGCE). Credentials come from Application Default
// Credentials unless Options.ClientOptions say otherwise.
//
// Errors are classified for cloudvm: ZONE_RESOURCE_POOL_EXHAUSTED is a
// capacity error (fail over to the next zone), QUOTA_EXCEEDED a quota
// error (the region's: the other market, or another type), rateLimitExceeded
// throttling and 5xx internal errors (retried with jitter by cloudvm).
//
// It was tested here only against an emulation of the REST endpoints it
// uses (internal/gceemu) whose instances are local namespace machines;
// real use needs an image with cloud-init, python and the training stack,
// a network whose firewall lets this scavd reach the instances' SSH port
// (PublicIP when scavd is outside the VPC), and a checkpoint directory on
// storage the instances share with scavd.
package gcecloud

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/notice"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/optimizer/price"
)

// DefaultMetadata is the metadata server as a GCE instance reaches it.
const DefaultMetadata = "http://metadata.google.internal"

// catalogProvider names GCE in the machine catalog.
const catalogProvider = "gce"

// Options configure the provider.
type Options struct {
	// Logger is required; the provider names its logger "gce".
	Logger *zap.Logger
	// Project is the Google Cloud project; required.
	Project string
	// Zones are the zones to use (one region); required.
	Zones []string
	// Types are the machine types offered; each must be in Catalog, which
	// gives its prices in the zones' region and its GPUs (its slots).
	Types   []string
	Catalog *price.Catalog
	// Image is the boot disk's source image
	// (projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64);
	// required to provision. DiskGB is its size (default 50).
	Image  string
	DiskGB int64
	// Network and Subnetwork (default: the project's default network).
	Network, Subnetwork string
	// PublicIP gives each instance an external address, which the
	// launcher reaches it at (scavd outside the VPC).
	PublicIP bool
	// ServiceAccount runs the instances (default: none).
	ServiceAccount string
	// Endpoint overrides the compute API's base URL (an emulation:
	// its URL + "/compute/v1/").
	Endpoint string
	// Metadata is the metadata server's base URL as the instances reach
	// it (default DefaultMetadata).
	Metadata string
	// HTTPClient, when set, is the client's HTTP client.
	HTTPClient *http.Client
	// ClientOptions are more options of the client (credentials,
	// option.WithoutAuthentication for an emulation).
	ClientOptions []option.ClientOption
	// Poll is the shortest delay between polls of an operation or an
	// instance (default 1 s; it backs off to 10 s).
	Poll time.Duration
}

// Provider is the gce provider. It implements provider.Provider.
type Provider struct {
	provider.Catalogued
	o      Options
	log    *zap.Logger
	svc    *compute.Service
	region string
}

var (
	_ provider.Provider         = (*Provider)(nil)
	_ provider.MetadataFlavored = (*Provider)(nil)
)

// New makes the client and checks the types against the catalog.
func New(ctx context.Context, o Options) (*Provider, error) {
	if o.Logger == nil || o.Catalog == nil || o.Project == "" || len(o.Zones) == 0 || len(o.Types) == 0 {
		return nil, errors.New("new gce provider: Options.Logger, Catalog, Project, Zones and Types are required")
	}
	if o.Metadata == "" {
		o.Metadata = DefaultMetadata
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.DiskGB <= 0 {
		o.DiskGB = 50
	}
	region := regionOf(o.Zones[0])
	for _, z := range o.Zones {
		if regionOf(z) != region {
			return nil, fmt.Errorf("new gce provider: zones %v are in more than one region", o.Zones)
		}
	}
	opts := slices.Clone(o.ClientOptions)
	if o.Endpoint != "" {
		opts = append(opts, option.WithEndpoint(o.Endpoint))
	}
	if o.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(o.HTTPClient))
	}
	svc, err := compute.NewService(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("new gce provider: %w: %w", provider.ErrUnavailable, err)
	}
	p := &Provider{o: o, log: o.Logger.Named("gce"), svc: svc, region: region}
	if p.Catalogued, err = provider.NewCatalogued(o.Catalog, o.Types, region, o.Zones, false); err != nil {
		return nil, fmt.Errorf("new gce provider: the machine catalog (cloud.catalog) must price every type in %s: %w", region, err)
	}
	return p, nil
}

// Name returns "gce".
func (p *Provider) Name() string { return "gce" }

// Metadata is the metadata server's base URL.
func (p *Provider) Metadata() string { return p.o.Metadata }

// MetadataFlavor is GCE's: notices are instance/preempted and maintenance-event.
func (p *Provider) MetadataFlavor() string { return notice.FlavorGCE }

// Billing is the catalog's rule for gce, else GCE's: per second, a minute
// at least.
func (p *Provider) Billing() provider.Billing {
	return provider.CatalogBilling(p.o.Catalog, catalogProvider, provider.Billing{Granularity: time.Second, Minimum: time.Minute})
}

// Prices are the catalog's in the zones' region: on demand per type, spot
// per type and zone (GCE's spot prices are the region's).
func (p *Provider) Prices(_ context.Context, names []string) ([]provider.Price, error) {
	now := time.Now().UTC()
	var out []provider.Price
	for _, n := range names {
		if !p.Has(n) {
			return nil, fmt.Errorf("prices: type %q is not among %v", n, p.o.Types)
		}
		out = append(out, provider.Price{Type: n, Market: provider.OnDemand, USDPerHour: p.OnDemandUSD[n], At: now})
		for _, z := range p.o.Zones {
			if p.SpotUSD[n] > 0 {
				out = append(out, provider.Price{Type: n, Zone: z, Market: provider.Spot, USDPerHour: p.SpotUSD[n], At: now})
			}
		}
	}
	return out, nil
}

// classify wraps a client error, or an operation's, in the provider's
// error class.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return fmt.Errorf("%w: %w", provider.ErrInternal, err) // no answer
	}
	reasons := []string{}
	for _, e := range ge.Errors {
		reasons = append(reasons, e.Reason)
	}
	has := func(r ...string) bool {
		return slices.ContainsFunc(reasons, func(x string) bool { return slices.Contains(r, x) })
	}
	switch {
	case ge.Code == http.StatusTooManyRequests || has("rateLimitExceeded", "userRateLimitExceeded"):
		return fmt.Errorf("%w: %w", provider.ErrThrottled, err)
	case has("quotaExceeded", "QUOTA_EXCEEDED"):
		return fmt.Errorf("%w: %w", provider.ErrQuota, err)
	case ge.Code == http.StatusNotFound:
		return fmt.Errorf("%w: %w", provider.ErrNotFound, err)
	case ge.Code >= 500:
		return fmt.Errorf("%w: %w", provider.ErrInternal, err)
	case ge.Code == http.StatusUnauthorized || ge.Code == http.StatusForbidden:
		return fmt.Errorf("%w: %w", provider.ErrUnavailable, err)
	}
	return err
}

// operationError classifies a failed operation's first error.
func operationError(op *compute.Operation) error {
	if op.Error == nil || len(op.Error.Errors) == 0 {
		return nil
	}
	e := op.Error.Errors[0]
	err := fmt.Errorf("operation %s: %s: %s", op.Name, e.Code, e.Message)
	switch {
	case strings.Contains(e.Code, "RESOURCE_POOL_EXHAUSTED") || e.Code == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS" || e.Code == "RESOURCE_NOT_READY":
		return fmt.Errorf("%w: %w", provider.ErrCapacity, err)
	case e.Code == "QUOTA_EXCEEDED":
		return fmt.Errorf("%w: %w", provider.ErrQuota, err)
	case e.Code == "RESOURCE_ALREADY_EXISTS" || e.Code == "ALREADY_EXISTS":
		return fmt.Errorf("%w: %w", errExists, err)
	case e.Code == "INTERNAL_ERROR":
		return fmt.Errorf("%w: %w", provider.ErrInternal, err)
	}
	return err
}

// errExists: the instance an insert names exists (a retried insert).
var errExists = errors.New("already exists")

// regionOf is a zone's region ("us-central1-a": "us-central1").
func regionOf(zone string) string {
	if i := strings.LastIndexByte(zone, '-'); i > 0 {
		return zone[:i]
	}
	return zone
}
