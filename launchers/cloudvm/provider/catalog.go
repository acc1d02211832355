package provider

import (
	"context"
	"errors"
	"slices"

	"github.com/scavenger-ml/scavenger/optimizer/price"
)

// Catalogued is what a cloud provider knows of its instance types from the
// machine catalog: their shapes and slots, and their prices in its region.
// A provider embeds it to answer Types.
type Catalogued struct {
	names []string
	types map[string]InstanceType
	// OnDemandUSD and SpotUSD are $/hour by type in the region (SpotUSD 0:
	// the catalog has no spot price there).
	OnDemandUSD, SpotUSD map[string]float64
}

// NewCatalogued looks names up in cat, priced in region and offered in
// zones; a type has a spot market when spot says so or the catalog has a
// spot price for it. Every type missing, or without an on-demand price in
// region, is an error.
func NewCatalogued(cat *price.Catalog, names []string, region string, zones []string, spot bool) (Catalogued, error) {
	c := Catalogued{names: slices.Clone(names), types: map[string]InstanceType{}, OnDemandUSD: map[string]float64{}, SpotUSD: map[string]float64{}}
	var errs []error
	for _, name := range names {
		m, err := cat.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		od, err := m.HourlyIn(region, false)
		if err != nil {
			errs = append(errs, err)
		}
		sp, _ := m.HourlyIn(region, true)
		c.OnDemandUSD[name], c.SpotUSD[name] = od, sp
		c.types[name] = InstanceType{Name: name, Slots: m.WorkerSlots(), CPUs: m.VCPUs, MemoryMiB: int(m.MemoryGiB * 1024),
			Zones: slices.Clone(zones), Spot: spot || sp > 0}
	}
	return c, errors.Join(errs...)
}

// Types lists the types, in the order they were named.
func (c Catalogued) Types(context.Context) ([]InstanceType, error) {
	out := make([]InstanceType, 0, len(c.names))
	for _, name := range c.names {
		out = append(out, c.types[name])
	}
	return out, nil
}

// Has reports whether name is one of the types.
func (c Catalogued) Has(name string) bool {
	_, ok := c.types[name]
	return ok
}
