package localcloud

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"slices"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/optimizer/price"
)

//go:embed catalog.json
var defaultCatalog []byte

// Provider and Region name the local cloud in its catalog: the types it
// sells are priced in region Region, and its zones and billing rule are
// those of provider Provider (see price.Catalog).
const (
	Provider = "local"
	Region   = "local"
)

// DefaultCatalog is the embedded catalog: loc.half (0.5 CPU) and loc.full
// (1 CPU), on demand and spot, in zones loc-a and loc-b, billed per second
// with a minute at least (as EC2).
func DefaultCatalog() *price.Catalog {
	c, err := ParseCatalog(defaultCatalog, "embedded catalog")
	if err != nil {
		panic(err) // the embedded catalog is tested
	}
	return c
}

// LoadCatalog reads a local cloud catalog file (price.Catalog's schema).
func LoadCatalog(path string) (*price.Catalog, error) {
	c, err := price.LoadFile(path)
	if err != nil {
		return nil, fmt.Errorf("local cloud catalog: %w", err)
	}
	return c, CheckCatalog(c, path)
}

// ParseCatalog reads a local cloud catalog.
func ParseCatalog(b []byte, name string) (*price.Catalog, error) {
	c, err := price.Parse(bytes.NewReader(b), name)
	if err != nil {
		return nil, fmt.Errorf("local cloud catalog: %w", err)
	}
	return c, CheckCatalog(c, name)
}

// CheckCatalog checks that c is a catalog the local cloud can sell from:
// zones for its region, and for every type a CPU quota, a memory limit and
// an on-demand price in that region (a type with a spot price there has a
// spot market).
func CheckCatalog(c *price.Catalog, name string) error {
	var errs []error
	if len(c.Zones(Provider, Region)) == 0 {
		errs = append(errs, fmt.Errorf(`no zones: want providers.%s.zones.%s`, Provider, Region))
	}
	for _, t := range c.Types {
		if _, err := t.HourlyIn(Region, false); !(t.VCPUs > 0) || !(t.MemoryGiB > 0) || err != nil {
			errs = append(errs, fmt.Errorf("type %s: want vcpus and memory_gib positive and an on-demand price in region %s (%v)", t.Name, Region, err))
		}
	}
	if len(c.Types) == 0 {
		errs = append(errs, errors.New("no types"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("local cloud catalog %s: %w", name, err)
	}
	return nil
}

// lookup returns the type called name.
func lookup(c *price.Catalog, name string) (price.MachineType, bool) {
	i := slices.IndexFunc(c.Types, func(t price.MachineType) bool { return t.Name == name })
	if i < 0 {
		return price.MachineType{}, false
	}
	return c.Types[i], true
}

// spotUSD is t's spot price in the local region (0: no spot market).
func spotUSD(t price.MachineType) float64 {
	p, _ := t.HourlyIn(Region, true)
	return p
}

// billing is the catalog's billing rule (exact, without one).
func billing(c *price.Catalog) provider.Billing {
	return provider.CatalogBilling(c, Provider, provider.Billing{})
}
