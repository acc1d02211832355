package localcloud

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

//go:embed catalog.json
var defaultCatalog []byte

// Catalog is what the local cloud sells: its zones, its billing rules and
// its instance types with their shapes and prices.
type Catalog struct {
	// Region names the cloud (a label).
	Region string `json:"region"`
	// Zones are the zones every type is offered in.
	Zones []string `json:"zones"`
	// Billing is per GranularityS seconds, MinimumS at least.
	Billing struct {
		GranularityS float64 `json:"granularity_s"`
		MinimumS     float64 `json:"minimum_s"`
	} `json:"billing"`
	Types []Type `json:"types"`
}

// Type is one instance type: the cgroup limits that make it, the workers it
// takes and its prices.
type Type struct {
	Name string `json:"name"`
	// CPUs is the CPU quota; MemoryMiB the memory limit; DiskMiB the size
	// of the private local disk (tmpfs at /mnt).
	CPUs      float64 `json:"cpus"`
	MemoryMiB int     `json:"memory_mib"`
	DiskMiB   int     `json:"disk_mib"`
	// Slots is how many workers one instance takes.
	Slots int `json:"slots"`
	// OnDemandUSD and SpotUSD are $/hour (SpotUSD 0: no spot market).
	OnDemandUSD float64 `json:"on_demand_usd"`
	SpotUSD     float64 `json:"spot_usd,omitempty"`
	// Capacity, when positive, is how many instances of the type one zone
	// holds; beyond it a request fails with provider.ErrCapacity.
	Capacity int `json:"capacity,omitempty"`
}

// DefaultCatalog is the embedded catalog: loc.half (0.5 CPU) and loc.full
// (1 CPU), on demand and spot, in zones loc-a and loc-b, billed per second
// with a minute at least (as EC2).
func DefaultCatalog() *Catalog {
	c, err := ParseCatalog(bytes.NewReader(defaultCatalog), "embedded catalog")
	if err != nil {
		panic(err) // the embedded catalog is tested
	}
	return c
}

// LoadCatalog reads a catalog file.
func LoadCatalog(path string) (*Catalog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open local cloud catalog: %w", err)
	}
	defer f.Close()
	return ParseCatalog(f, path)
}

// ParseCatalog reads a catalog in JSON (unknown fields rejected) and checks
// every entry.
func ParseCatalog(r io.Reader, name string) (*Catalog, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var c Catalog
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("parse local cloud catalog %s: %w", name, err)
	}
	var errs []error
	if len(c.Zones) == 0 {
		errs = append(errs, errors.New("no zones"))
	}
	if c.Billing.GranularityS < 0 || c.Billing.MinimumS < 0 {
		errs = append(errs, errors.New("negative billing granularity or minimum"))
	}
	seen := map[string]bool{}
	for i, t := range c.Types {
		if t.Name == "" || seen[t.Name] {
			errs = append(errs, fmt.Errorf("type %d: empty or duplicate name %q", i, t.Name))
		}
		seen[t.Name] = true
		if !(t.CPUs > 0) || t.MemoryMiB <= 0 || t.DiskMiB < 0 || t.Slots < 1 || !(t.OnDemandUSD > 0) || t.SpotUSD < 0 || t.Capacity < 0 {
			errs = append(errs, fmt.Errorf("type %s: want cpus, memory_mib, slots and on_demand_usd positive, the rest not negative: %+v", t.Name, t))
		}
	}
	if len(c.Types) == 0 {
		errs = append(errs, errors.New("no types"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("parse local cloud catalog %s: %w", name, err)
	}
	return &c, nil
}

// lookup returns the type called name.
func (c *Catalog) lookup(name string) (Type, bool) {
	i := slices.IndexFunc(c.Types, func(t Type) bool { return t.Name == name })
	if i < 0 {
		return Type{}, false
	}
	return c.Types[i], true
}

// billing is the catalog's billing rule.
func (c *Catalog) billing() provider.Billing {
	return provider.Billing{
		Granularity: time.Duration(c.Billing.GranularityS * float64(time.Second)),
		Minimum:     time.Duration(c.Billing.MinimumS * float64(time.Second)),
	}
}
