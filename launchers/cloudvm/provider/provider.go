// Package provider is the contract between launchers/cloudvm and the clouds
// it acquires machines from: the Provider interface, what it takes
// (ProvisionRequest, Boot) and returns (Instance, InstanceType, Price,
// Billing), and the classes of its errors, by which cloudvm decides to
// retry (ErrThrottled, ErrInternal), to fail over to another zone or
// market (ErrCapacity), or to give up.
//
// Providers: launchers/cloudvm/awscloud (EC2), launchers/cloudvm/gcecloud
// (Compute Engine) and launchers/cloudvm/localcloud
// (the local test and development cloud: namespace machines on this host).
// Their types, prices and billing rules come from the one machine catalog
// (optimizer/price; CatalogBilling). NewKeys makes the keys instances boot
// with.
package provider

import (
	"context"
	"errors"
	"time"

	"github.com/scavenger-ml/scavenger/optimizer/price"
)

// Markets an instance is bought in.
const (
	OnDemand = "on-demand"
	Spot     = "spot"
)

// States of an instance (EC2's names).
const (
	Pending      = "pending"
	Running      = "running"
	ShuttingDown = "shutting-down"
	Terminated   = "terminated"
)

// Tags cloudvm puts on every instance it provisions.
const (
	// TagOwner names the scavd whose launcher owns the instance.
	TagOwner = "scavenger:owner"
	// TagJob and TagAttempt name the job and the attempt that provisioned it.
	TagJob     = "scavenger:job"
	TagAttempt = "scavenger:attempt"
	// TagName is the instance's display name ("Name" on EC2).
	TagName = "Name"
)

// Errors a provider wraps its failures in, so that cloudvm can tell them apart.
var (
	// ErrCapacity: the zone has no capacity for the type in the market now
	// (EC2 InsufficientInstanceCapacity, SpotMaxPriceTooLow, ...). Try
	// another zone, market or type.
	ErrCapacity = errors.New("no capacity")
	// ErrThrottled: too many requests (EC2 RequestLimitExceeded). Retry later.
	ErrThrottled = errors.New("throttled")
	// ErrInternal: the provider failed on its side (5xx). Retry.
	ErrInternal = errors.New("provider internal error")
	// ErrQuota: the account's quota for the type in the market is used up
	// in the region (EC2 VcpuLimitExceeded, InstanceLimitExceeded,
	// MaxSpotInstanceCountExceeded; GCE QUOTA_EXCEEDED), the errors a new
	// account meets first. No zone of the region will do: try the other
	// market, or another type.
	ErrQuota = errors.New("quota exceeded")
	// ErrNotFound: no such instance (EC2 InvalidInstanceID.NotFound, which
	// also answers for an instance launched a moment ago).
	ErrNotFound = errors.New("no such instance")
	// ErrUnavailable: the provider cannot work here at all (no root for
	// the local provider, no credentials for a cloud); the wrapped error
	// says what to do.
	ErrUnavailable = errors.New("provider unavailable")
)

// Retryable reports whether err is worth retrying as it is.
func Retryable(err error) bool { return errors.Is(err, ErrThrottled) || errors.Is(err, ErrInternal) }

// InstanceType is a machine type a provider offers.
type InstanceType struct {
	// Name is the provider's name for it ("loc.half", "g4dn.xlarge").
	Name string `json:"name"`
	// Slots is how many workers one instance of it takes (its GPUs, or 1).
	Slots int `json:"slots"`
	// CPUs and MemoryMiB describe it (0: unknown).
	CPUs      float64 `json:"cpus,omitempty"`
	MemoryMiB int     `json:"memory_mib,omitempty"`
	// Zones are where it can be had; Spot says whether it has a spot market.
	Zones []string `json:"zones"`
	Spot  bool     `json:"spot"`
}

// Price is the $/hour of one instance of a type in a zone and market.
type Price struct {
	Type   string `json:"type"`
	Zone   string `json:"zone,omitempty"`
	Market string `json:"market"`
	// USDPerHour is the price; At is when it was set (spot prices move).
	USDPerHour float64   `json:"usd_per_hour"`
	At         time.Time `json:"at,omitempty"`
}

// Billing is how a provider bills an instance: from launch to
// termination, in units of Granularity, Minimum at least.
type Billing struct {
	Granularity time.Duration `json:"granularity"`
	Minimum     time.Duration `json:"minimum"`
}

// CatalogBilling is provider name's billing rule in the machine catalog
// cat, or def where cat has none.
func CatalogBilling(cat *price.Catalog, name string, def Billing) Billing {
	b := cat.BillingOf(name)
	if b == (price.Billing{}) {
		return def
	}
	return Billing{Granularity: time.Duration(b.GranularityS * float64(time.Second)), Minimum: time.Duration(b.MinimumS * float64(time.Second))}
}

// Boot is what every instance of a request boots with: the SSH key that
// logs in as the login user, and the host key it presents (cloudvm made
// both, so the host key is known before the instance exists and is
// verified at every connection).
type Boot struct {
	// AuthorizedKey is an authorized_keys line.
	AuthorizedKey string `json:"authorized_key"`
	// HostKey is the instance's private ed25519 host key (OpenSSH PEM) and
	// HostKeyPublic its public key (authorized_keys form).
	HostKey       []byte `json:"host_key"`
	HostKeyPublic string `json:"host_key_public"`
}

// ProvisionRequest asks for Count instances of Type in Zone and Market.
type ProvisionRequest struct {
	Type   string `json:"type"`
	Count  int    `json:"count"`
	Market string `json:"market"`
	Zone   string `json:"zone"`
	// Tags are put on every instance.
	Tags map[string]string `json:"tags"`
	// Token makes the request idempotent: a request with a Token seen
	// before returns the instances of that request instead of launching
	// more (EC2's ClientToken).
	Token string `json:"token"`
	// MaxPriceUSD caps a spot request's price (0: the on-demand price).
	MaxPriceUSD float64 `json:"max_price_usd,omitempty"`
	Boot        Boot    `json:"boot"`
	// OrphanTimeout, when positive, gives every instance a watchdog
	// (WatchdogScript) that ends it once no SSH connection to it has been
	// open for this long.
	OrphanTimeout time.Duration `json:"orphan_timeout,omitempty"`
}

// Instance is one instance as a provider describes it.
type Instance struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Zone   string `json:"zone"`
	Market string `json:"market"`
	State  string `json:"state"`
	// Addr is the address the launcher reaches it at (its private IP).
	Addr string            `json:"addr,omitempty"`
	Tags map[string]string `json:"tags,omitempty"`
	// Launched is when it was launched; billing starts there.
	Launched time.Time `json:"launched"`
}

// Alive reports whether the instance is pending or running.
func (i Instance) Alive() bool { return i.State == Pending || i.State == Running }

// Provider is a cloud cloudvm acquires instances from. Its methods are safe
// for concurrent use.
type Provider interface {
	// Name is the provider's name ("local", "aws").
	Name() string
	// Types lists the instance types it offers.
	Types(ctx context.Context) ([]InstanceType, error)
	// Prices returns the current prices of types: on-demand per type, and
	// spot per type and zone where there is a spot market.
	Prices(ctx context.Context, types []string) ([]Price, error)
	// Billing says how instances are billed.
	Billing() Billing
	// Provision launches the instances of req (see its Token) and returns
	// them, pending or running.
	Provision(ctx context.Context, req ProvisionRequest) ([]Instance, error)
	// WaitReady waits until the instances ids run and have addresses, and
	// returns them; an instance that ends instead is an error.
	WaitReady(ctx context.Context, ids []string) ([]Instance, error)
	// List returns the instances, not terminated, that carry every tag of tags.
	List(ctx context.Context, tags map[string]string) ([]Instance, error)
	// Terminate ends the instances ids; ids already gone are no error.
	Terminate(ctx context.Context, ids []string) error
	// Metadata is the base URL of the instance metadata service as an
	// instance reaches it (AWS: http://169.254.169.254), where the spot
	// interruption notices appear: cloudvm polls it from each instance,
	// through the instance's SSH connection.
	Metadata() string
}

// PriceHistorian is a Provider whose spot prices move and which can say
// how: cloudvm bills a spot instance at the price in effect each second of
// its life.
type PriceHistorian interface {
	// SpotPriceHistory returns the spot prices of typ in zone in effect
	// from from to to, oldest first, the first one in effect at from (its
	// At may be earlier).
	SpotPriceHistory(ctx context.Context, typ, zone string, from, to time.Time) ([]Price, error)
}

// MetadataFlavored is a Provider whose instances' metadata service is not
// AWS's IMDSv2 (the default): cloudvm polls its notices in its flavor
// (notice.FlavorGCE).
type MetadataFlavored interface {
	MetadataFlavor() string
}
