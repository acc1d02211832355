// Package price is the machine catalog, the one type every part of
// Scavenger reads machines from (the optimizer and the simulator, the cloud
// providers, the local cloud): each machine type's provider, GPU model and
// count, vCPUs, memory, the workers one machine takes (slots), its region
// and its on-demand and spot $/hour there and in other regions, each price
// with the date and source it comes from; and, per provider, its billing
// rule (granularity and minimum) and each region's zones. A default catalog
// is embedded; a user file (same JSON schema) overrides or adds types by
// name. The local cloud (launchers/cloudvm/localcloud) sells the types of a
// catalog of this schema.
package price

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
)

//go:embed catalog.json
var defaultCatalog []byte

// Price is one hourly price with its provenance.
type Price struct {
	// USDPerHour is the price of one machine for one hour.
	USDPerHour float64 `json:"usd_per_hour"`
	// AsOf is the date (YYYY-MM or YYYY-MM-DD) the price was read.
	AsOf string `json:"as_of"`
	// Source says where the price comes from.
	Source string `json:"source"`
}

// MachineType is one purchasable machine.
type MachineType struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	GPUModel string `json:"gpu_model"`
	GPUs     int    `json:"gpus"`
	// VCPUs and MemoryGiB may be fractions (a local cloud's half a CPU).
	VCPUs     float64 `json:"vcpus"`
	MemoryGiB float64 `json:"memory_gib"`
	// Slots is how many workers one machine takes (0: its GPUs, or 1).
	Slots int `json:"slots,omitempty"`
	// DiskMiB is the size of one machine's local disk (0: unknown).
	DiskMiB int `json:"disk_mib,omitempty"`
	// Capacity, when positive, is how many machines of the type one zone
	// holds (the local cloud refuses more, as a full zone does).
	Capacity int `json:"capacity,omitempty"`
	// Region is where OnDemand and Spot apply; Regions holds the prices
	// elsewhere.
	Region string `json:"region"`
	// TraceTypes are the shared/traces suffixes measured on this machine
	// (e.g. "aws" for g4dn.12xlarge).
	TraceTypes []string                `json:"trace_types,omitempty"`
	OnDemand   *Price                  `json:"on_demand,omitempty"`
	Spot       *Price                  `json:"spot,omitempty"`
	Regions    map[string]RegionPrices `json:"regions,omitempty"`
}

// RegionPrices are a machine type's prices in a region other than its own.
type RegionPrices struct {
	OnDemand *Price `json:"on_demand,omitempty"`
	Spot     *Price `json:"spot,omitempty"`
}

// Hourly returns the on-demand price, or the spot price when spot is
// true, in the type's region.
func (m MachineType) Hourly(spot bool) (float64, error) { return m.HourlyIn("", spot) }

// HourlyIn is Hourly in region ("" or the type's own: its Region).
func (m MachineType) HourlyIn(region string, spot bool) (float64, error) {
	od, sp := m.OnDemand, m.Spot
	if region != "" && region != m.Region {
		r, ok := m.Regions[region]
		if !ok {
			return 0, fmt.Errorf("price of %s in %s: %w: the catalog prices it in %s", m.Name, region, ErrNoPrice, strings.Join(m.PricedRegions(), ", "))
		}
		od, sp = r.OnDemand, r.Spot
	}
	p, kind := od, "on-demand"
	if spot {
		p, kind = sp, "spot"
	}
	if p == nil {
		return 0, fmt.Errorf("price of %s: %w: %s", m.Name, ErrNoPrice, kind)
	}
	return p.USDPerHour, nil
}

// PricedRegions lists the regions the type has prices in, its own first.
func (m MachineType) PricedRegions() []string {
	return append([]string{m.Region}, slices.Sorted(maps.Keys(m.Regions))...)
}

// WorkerSlots is how many workers one machine takes: Slots, else its
// GPUs, else 1.
func (m MachineType) WorkerSlots() int {
	if m.Slots > 0 {
		return m.Slots
	}
	return max(m.GPUs, 1)
}

// Billing is how a provider bills a machine: from launch to termination,
// in units of GranularityS seconds, MinimumS seconds at least.
type Billing struct {
	GranularityS float64 `json:"granularity_s"`
	MinimumS     float64 `json:"minimum_s"`
}

// Provider is what the catalog knows of a provider beyond its types.
type Provider struct {
	Billing Billing `json:"billing"`
	// Zones are each region's zones, by region.
	Zones map[string][]string `json:"zones,omitempty"`
}

// Catalog is a set of machine types by name, and their providers.
type Catalog struct {
	Providers map[string]Provider `json:"providers,omitempty"`
	Types     []MachineType       `json:"types"`
}

// BillingOf is provider's billing rule (zero: unknown, billed exactly).
func (c *Catalog) BillingOf(provider string) Billing { return c.Providers[provider].Billing }

// Zones are the zones of provider's region (nil: unknown).
func (c *Catalog) Zones(provider, region string) []string {
	return slices.Clone(c.Providers[provider].Zones[region])
}

// Default returns the embedded catalog.
func Default() (*Catalog, error) {
	c, err := Parse(bytes.NewReader(defaultCatalog), "embedded catalog")
	if err != nil {
		return nil, fmt.Errorf("default price catalog: %w", err)
	}
	return c, nil
}

// Parse reads a catalog in JSON from r; name identifies it in errors. Unknown
// fields are rejected so that typos do not go unnoticed. Every invalid entry
// is reported.
func Parse(r io.Reader, name string) (*Catalog, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var c Catalog
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("parse price catalog %s: %w", name, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("parse price catalog %s: %w", name, err)
	}
	return &c, nil
}

// Validate checks every entry and returns all problems joined.
func (c *Catalog) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, m := range c.Types {
		bad := func(format string, a ...any) {
			errs = append(errs, fmt.Errorf("type %d (%s): %w: %s", i, m.Name, ErrInvalid, fmt.Sprintf(format, a...)))
		}
		if strings.TrimSpace(m.Name) == "" {
			bad("empty name")
		}
		if seen[m.Name] {
			bad("duplicate name")
		}
		seen[m.Name] = true
		if m.GPUs < 0 || !(m.VCPUs >= 0) || !(m.MemoryGiB >= 0) || m.Slots < 0 || m.DiskMiB < 0 || m.Capacity < 0 {
			bad("negative GPU, vCPU, memory, slot, disk or capacity count")
		}
		if m.OnDemand == nil && m.Spot == nil {
			bad("no price")
		}
		checkPrice := func(kind string, p *Price) {
			if p == nil {
				return
			}
			if !(p.USDPerHour >= 0) {
				bad("%s price %g", kind, p.USDPerHour)
			}
			if p.AsOf == "" || p.Source == "" {
				bad("%s price without as_of date and source", kind)
			}
		}
		checkPrice("on_demand", m.OnDemand)
		checkPrice("spot", m.Spot)
		for _, r := range slices.Sorted(maps.Keys(m.Regions)) {
			if r == "" || r == m.Region {
				bad("regions: %q is empty or the type's own region (its prices are on_demand and spot)", r)
			}
			checkPrice(r+" on_demand", m.Regions[r].OnDemand)
			checkPrice(r+" spot", m.Regions[r].Spot)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Providers)) {
		if b := c.Providers[name].Billing; !(b.GranularityS >= 0) || !(b.MinimumS >= 0) {
			errs = append(errs, fmt.Errorf("provider %s: %w: negative billing granularity or minimum", name, ErrInvalid))
		}
	}
	return errors.Join(errs...)
}

// Merge returns a catalog with the types of c, replaced or extended by those
// of override (matched by name). Neither input is modified.
// A provider of override replaces c's.
func (c *Catalog) Merge(override *Catalog) *Catalog {
	out := &Catalog{Types: append([]MachineType(nil), c.Types...), Providers: maps.Clone(c.Providers)}
	if override == nil {
		return out
	}
	if out.Providers == nil && len(override.Providers) > 0 {
		out.Providers = map[string]Provider{}
	}
	maps.Copy(out.Providers, override.Providers)
	idx := map[string]int{}
	for i, m := range out.Types {
		idx[m.Name] = i
	}
	for _, m := range override.Types {
		if i, ok := idx[m.Name]; ok {
			out.Types[i] = m
			continue
		}
		idx[m.Name] = len(out.Types)
		out.Types = append(out.Types, m)
	}
	return out
}

// Lookup returns the machine type with the given name, or the one measured
// under that shared/traces suffix.
func (c *Catalog) Lookup(name string) (MachineType, error) {
	for _, m := range c.Types {
		if m.Name == name {
			return m, nil
		}
	}
	for _, m := range c.Types {
		for _, t := range m.TraceTypes {
			if t == name {
				return m, nil
			}
		}
	}
	return MachineType{}, fmt.Errorf("look up machine type %s: %w", name, ErrUnknownType)
}

// Row is one line of the `scavctl prices` table.
type Row struct {
	Name, Provider, GPU, Region string
	GPUs                        int
	VCPUs, MemoryGiB            float64
	OnDemand, Spot              float64 // 0 when unknown
	AsOf, Source                string
}

// Rows returns the catalog as table rows sorted by provider then name.
func (c *Catalog) Rows() []Row {
	rows := make([]Row, 0, len(c.Types))
	for _, m := range c.Types {
		r := Row{Name: m.Name, Provider: m.Provider, GPU: m.GPUModel, Region: m.Region, GPUs: m.GPUs, VCPUs: m.VCPUs, MemoryGiB: m.MemoryGiB}
		if m.OnDemand != nil {
			r.OnDemand, r.AsOf, r.Source = m.OnDemand.USDPerHour, m.OnDemand.AsOf, m.OnDemand.Source
		}
		if m.Spot != nil {
			r.Spot = m.Spot.USDPerHour
			if r.AsOf == "" {
				r.AsOf, r.Source = m.Spot.AsOf, m.Spot.Source
			}
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Provider != rows[j].Provider {
			return rows[i].Provider < rows[j].Provider
		}
		return rows[i].Name < rows[j].Name
	})
	return rows
}

// WriteTable writes rows as an aligned text table (for `scavctl prices`).
func WriteTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %-20s %-24s %4s %5s %7s %-12s %10s %10s %s\n", "PROVIDER", "TYPE", "GPU", "GPUS", "VCPU", "MEM_GIB", "REGION", "$/H", "SPOT_$/H", "AS_OF")
	for _, r := range rows {
		spot := "-"
		if r.Spot > 0 {
			spot = fmt.Sprintf("%.4f", r.Spot)
		}
		fmt.Fprintf(&b, "%-8s %-20s %-24s %4d %5g %7g %-12s %10.4f %10s %s\n", r.Provider, r.Name, r.GPU, r.GPUs, r.VCPUs, r.MemoryGiB, r.Region, r.OnDemand, spot, r.AsOf)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write price table: %w", err)
	}
	return nil
}

// LoadFile parses the catalog file at path (a user override).
func LoadFile(path string) (*Catalog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open price catalog: %w", err)
	}
	defer f.Close()
	return Parse(f, path)
}

// WithOverride returns the default catalog merged with the user file at
// path; an empty path returns the default alone.
func WithOverride(path string) (*Catalog, error) {
	c, err := Default()
	if err != nil {
		return nil, err
	}
	if path == "" {
		return c, nil
	}
	u, err := LoadFile(path)
	if err != nil {
		return nil, err
	}
	return c.Merge(u), nil
}
