package control

import (
	"fmt"
	"slices"
	"strings"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry/progress"
)

// Check collects every problem with req: those api.RunRequest.Validate
// finds, and in their place among them those that need the optimizer and
// the progress parser (a moving policy whose search space or policy cannot
// be built, a step regex that does not parse). The daemon checks every
// submission with it, and scavctl every request before it sends it.
func Check(req api.RunRequest) error {
	return req.ValidateWith(func(r *api.RunRequest) []error {
		var errs []error
		if p := r.Optimize.Policy; p != "" && !slices.Contains(policy.Names, p) {
			// The name first: what a policy needs means nothing for one that does not exist.
			errs = append(errs, fmt.Errorf("--policy %q: no such policy; use one of %s", p, strings.Join(policy.Names, ", ")))
		} else if r.Optimize.Active() {
			spec, _, err := Spec(r.Optimize, r.Config)
			if err == nil {
				err = policy.Check(r.Optimize.Policy, spec)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		if _, err := progress.New(r.StepRegex); err != nil {
			errs = append(errs, err)
		}
		return errs
	})
}

// Spec builds the policy's search space for a job that asks opt and starts
// at start on one node: its machine type with MinWorkers..MaxWorkers
// workers and power-of-two batches in the batch bounds. It also returns
// the price per hour the cost objectives use.
func Spec(opt api.Optimize, start plugins.Config) (policy.Spec, float64, error) {
	kind, err := objective.ParseKind(opt.Objective)
	if opt.Objective == "" {
		kind, err = objective.Time, nil
	}
	if err != nil {
		return policy.Spec{}, 0, fmt.Errorf("objective: %w", err)
	}
	if start.GlobalBatch < 1 {
		return policy.Spec{}, 0, fmt.Errorf("an optimized job needs a starting --batch-size")
	}
	minW, maxW := max(1, opt.MinWorkers), opt.MaxWorkers
	if maxW == 0 {
		maxW = start.Workers
	}
	minB, maxB := opt.MinBatch, opt.MaxBatch
	if minB == 0 {
		minB = start.GlobalBatch
	}
	if maxB == 0 {
		maxB = start.GlobalBatch
	}
	if minW > maxW || minB > maxB {
		return policy.Spec{}, 0, fmt.Errorf("empty bounds: workers %d:%d, batch %d:%d", minW, maxW, minB, maxB)
	}
	var batches []int
	for b := minB; b <= maxB; b *= 2 {
		batches = append(batches, b)
	}
	if batches[len(batches)-1] != maxB {
		batches = append(batches, maxB)
	}
	typ := opt.MachineType
	if typ == "" {
		typ = "local"
	}
	cands, err := predict.Enumerate([]predict.Shape{{Type: typ, GPUsPerNode: maxW, MaxNodes: 1}}, batches,
		predict.Limits{MinWorkers: minW, MaxWorkers: maxW})
	if err != nil {
		return policy.Spec{}, 0, fmt.Errorf("enumerate candidates: %w", err)
	}
	keep := slices.DeleteFunc(cands, uneven)
	if len(keep) == 0 {
		return policy.Spec{}, 0, fmt.Errorf("no configuration in workers %d:%d, batch %d:%d divides evenly", minW, maxW, minB, maxB)
	}
	m0 := float64(opt.Base(start.GlobalBatch))
	target := float64(opt.TargetSamples) / m0
	if target <= 0 {
		return policy.Spec{}, 0, fmt.Errorf("an optimized job needs a target: --target-steps, --target-samples or --target-epochs")
	}
	price := opt.PriceUSDPerHour
	if price == 0 {
		price = 1
	}
	return policy.Spec{
		Candidates: keep,
		Prices:     map[string]float64{typ: price},
		M0:         m0,
		Target:     target,
		Objective:  objective.Objective{Kind: kind, DeadlineS: opt.Deadline.D().Seconds(), BudgetUSD: opt.BudgetUSD},
		RelaunchS:  3,
	}, price, nil
}

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

// CloudSpec builds the search space of a job that asks o and starts at
// start on a launcher whose offers are offers (plugins.Capabilities): the
// same objective, bounds, batches and target as Spec, over every type of
// o.Types (every offered type when empty) that is offered now within
// o.MaxPriceUSD, each with ⌈K/slots⌉ machines per configuration — one
// machine with 1..slots workers, or N full ones. A type is priced at its
// spot price when o.Spot allows spot and it is offered, else on demand.
func CloudSpec(o api.Optimize, start plugins.Config, offers []plugins.Offer) (Cloud, error) {
	base, _, err := Spec(o, start)
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
	keep := slices.DeleteFunc(cands, uneven)
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

// uneven reports a candidate whose batch its workers cannot share equally.
func uneven(c predict.Candidate) bool { return c.Batch%c.Workers != 0 }
