// Package price is the catalog of machine types and their prices: provider,
// name, GPU model and count, vCPUs, memory, region, on-demand and spot
// $/hour, each price with the date and source it comes from. A default
// catalog is embedded; a user file (same JSON schema) overrides or adds types
// by name.
package price

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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
	Name      string `json:"name"`
	Provider  string `json:"provider"`
	GPUModel  string `json:"gpu_model"`
	GPUs      int    `json:"gpus"`
	VCPUs     int    `json:"vcpus"`
	MemoryGiB int    `json:"memory_gib"`
	Region    string `json:"region"`
	// TraceTypes are the shared/traces suffixes measured on this machine
	// (e.g. "aws" for g4dn.12xlarge).
	TraceTypes []string `json:"trace_types,omitempty"`
	OnDemand   *Price   `json:"on_demand,omitempty"`
	Spot       *Price   `json:"spot,omitempty"`
}

// Hourly returns the on-demand price, or the spot price when spot is true.
func (m MachineType) Hourly(spot bool) (float64, error) {
	p := m.OnDemand
	kind := "on-demand"
	if spot {
		p, kind = m.Spot, "spot"
	}
	if p == nil {
		return 0, fmt.Errorf("price of %s: %w: %s", m.Name, ErrNoPrice, kind)
	}
	return p.USDPerHour, nil
}

// Catalog is a set of machine types by name.
type Catalog struct {
	Types []MachineType `json:"types"`
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
		if m.GPUs < 0 || m.VCPUs < 0 || m.MemoryGiB < 0 {
			bad("negative GPU, vCPU or memory count")
		}
		if m.OnDemand == nil && m.Spot == nil {
			bad("no price")
		}
		for _, p := range []struct {
			kind string
			p    *Price
		}{{"on_demand", m.OnDemand}, {"spot", m.Spot}} {
			if p.p == nil {
				continue
			}
			if !(p.p.USDPerHour >= 0) {
				bad("%s price %g", p.kind, p.p.USDPerHour)
			}
			if p.p.AsOf == "" || p.p.Source == "" {
				bad("%s price without as_of date and source", p.kind)
			}
		}
	}
	return errors.Join(errs...)
}

// Merge returns a catalog with the types of c, replaced or extended by those
// of override (matched by name). Neither input is modified.
func (c *Catalog) Merge(override *Catalog) *Catalog {
	out := &Catalog{Types: append([]MachineType(nil), c.Types...)}
	if override == nil {
		return out
	}
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
	GPUs, VCPUs, MemoryGiB      int
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
		fmt.Fprintf(&b, "%-8s %-20s %-24s %4d %5d %7d %-12s %10.4f %10s %s\n", r.Provider, r.Name, r.GPU, r.GPUs, r.VCPUs, r.MemoryGiB, r.Region, r.OnDemand, spot, r.AsOf)
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
