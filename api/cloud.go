package api

import (
	"fmt"
	"slices"

	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/plugins"
)

// Cloud is the search space of a job on a launcher that acquires machines:
// the policy's Spec over every allowed type, and how each type would be
// bought now.
type Cloud struct {
	Spec policy.Spec
	// Markets is the market each type is bought in (spot when allowed and
	// offered, else on demand); Slots the workers one machine takes.
	Markets map[string]string
	Slots   map[string]int
}

// CloudSpec builds the search space of a job that starts at start on a
// launcher whose offers are offers (plugins.Capabilities): the same
// objective, bounds, batches and target as Spec, over every type of
// o.Types (every offered type when empty) that is offered now within
// o.MaxPriceUSD, each with ⌈K/slots⌉ machines per configuration — one
// machine with 1..slots workers, or N full ones. A type is priced at its
// spot price when o.Spot allows spot and it is offered, else on demand.
func (o Optimize) CloudSpec(start plugins.Config, offers []plugins.Offer) (Cloud, error) {
	base, _, err := o.Spec(start, 0)
	if err != nil {
		return Cloud{}, err
	}
	maxW := o.MaxWorkers
	if maxW == 0 {
		maxW = start.Workers
	}
	var batches []int
	for _, c := range base.Candidates {
		if !slices.Contains(batches, c.Batch) {
			batches = append(batches, c.Batch)
		}
	}
	cl := Cloud{Markets: map[string]string{}, Slots: map[string]int{}}
	prices, minBill := map[string]float64{}, map[string]float64{}
	var shapes []predict.Shape
	for _, off := range offers {
		if len(o.Types) > 0 && !slices.Contains(o.Types, off.Type) {
			continue
		}
		market, price := plugins.MarketOnDemand, off.OnDemandUSD
		if o.Spot && off.SpotUSD > 0 {
			market, price = plugins.MarketSpot, off.SpotUSD
		}
		if price <= 0 || o.MaxPriceUSD > 0 && price > o.MaxPriceUSD {
			continue
		}
		slots := max(off.Slots, 1)
		cl.Markets[off.Type], cl.Slots[off.Type], prices[off.Type] = market, slots, price
		if off.MinimumBillS > 0 {
			minBill[off.Type] = off.MinimumBillS
		}
		shapes = append(shapes, predict.Shape{Type: off.Type, GPUsPerNode: slots, MaxNodes: max((maxW+slots-1)/slots, 1)})
	}
	if len(shapes) == 0 {
		return Cloud{}, fmt.Errorf("no machine type of %v is offered now within $%g/hour (offers: %+v)", o.Types, o.MaxPriceUSD, offers)
	}
	cands, err := predict.Enumerate(shapes, batches, predict.Limits{MinWorkers: max(1, o.MinWorkers), MaxWorkers: maxW})
	if err != nil {
		return Cloud{}, fmt.Errorf("enumerate candidates: %w", err)
	}
	var keep []predict.Candidate
	for _, c := range cands {
		if c.Batch%c.Workers == 0 {
			keep = append(keep, c)
		}
	}
	if len(keep) == 0 {
		return Cloud{}, fmt.Errorf("no configuration of %v divides evenly within the bounds", o.Types)
	}
	base.Candidates, base.Prices, base.MinimumBillS = keep, prices, minBill
	cl.Spec = base
	return cl, nil
}

// Candidate is cfg as the optimizer names it: its type (typ when cfg names
// none) and the machines its workers take.
func (c Cloud) Candidate(cfg plugins.Config, typ string) predict.Candidate {
	if cfg.MachineType != "" {
		typ = cfg.MachineType
	}
	slots := max(c.Slots[typ], 1)
	return predict.Candidate{Type: typ, Nodes: max((cfg.Workers+slots-1)/slots, 1), Workers: cfg.Workers, Batch: cfg.GlobalBatch}
}

// Config is the launcher's configuration of candidate c, bought in the
// type's market now.
func (c Cloud) Config(cand predict.Candidate, lr float64) plugins.Config {
	return plugins.Config{Workers: cand.Workers, GlobalBatch: cand.Batch, MachineType: cand.Type, Market: c.Markets[cand.Type], Nodes: cand.Nodes, LRScale: lr}
}
