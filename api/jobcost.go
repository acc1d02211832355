package api

import (
	"fmt"
	"strconv"
	"time"
)

// What a job costs, told one way
//
// Every view of a job's cost — scavctl report's text, PNG and HTML, top's
// COST column, the metrics, run's status and decision lines — takes it from
// Job.CostAt, so that they tell one story: the bill of the machines the
// job's launcher bought when there is one (cloudvm), else the job's time at
// the price set for its machine (--price, or --machine-type from the
// catalog), else nothing at all (no view shows a cost, and a decision's
// predicted cost, made at a placeholder price, is not shown either). Its
// Label is the words each view puts beside the figure.

// CostBasis says how a job's cost is known.
type CostBasis string

// The bases of a job's cost.
const (
	// CostBilled: the bill of the machines the job's launcher bought.
	CostBilled CostBasis = "billed"
	// CostPriced: the job's time at the price set for its machine.
	CostPriced CostBasis = "priced"
	// CostNone: neither; no view shows a cost.
	CostNone CostBasis = "none"
)

// CostBasis says how j's cost is known: billed when its launcher bills
// machines (it has a bill, or runs on a machine type the launcher chose),
// priced when a price is set, none otherwise.
func (j Job) CostBasis() CostBasis {
	switch {
	case j.Cost != nil || j.Config.MachineType != "":
		return CostBilled
	case j.Optimize.PriceUSDPerHour > 0:
		return CostPriced
	}
	return CostNone
}

// JobCost is what a job has cost by some time. What is left to spend is
// the forecast's (Forecast), counted down with the job's steps.
type JobCost struct {
	Basis CostBasis `json:"basis"`
	// USD is what the job cost by then: the bill so far, or the time since
	// it started at PriceUSDPerHour (0 with CostNone).
	USD             float64 `json:"usd"`
	PriceUSDPerHour float64 `json:"price_usd_per_hour,omitempty"`
}

// CostAt is what j has cost by now (see JobCost), the one figure every
// view of it shows.
func (j Job) CostAt(now time.Time) JobCost {
	c := JobCost{Basis: j.CostBasis()}
	switch c.Basis {
	case CostBilled:
		if j.Cost != nil {
			c.USD = j.Cost.USD
		}
	case CostPriced:
		c.PriceUSDPerHour = j.Optimize.PriceUSDPerHour
		if j.Started != nil {
			end := now
			if j.Ended != nil {
				end = *j.Ended
			}
			c.USD = max(0, end.Sub(*j.Started).Hours()) * c.PriceUSDPerHour
		}
	}
	return c
}

// ShowsCost reports whether a view shows a cost for j: decisions' predicted
// costs too are shown only then.
func (j Job) ShowsCost() bool { return j.CostBasis() != CostNone }

// Label is the cost in words, as every view writes it: "$0.00067 billed for
// its machines", "$0.0123 at $0.50/h", or that no price is set.
func (c JobCost) Label() string {
	switch c.Basis {
	case CostBilled:
		return USDText(c.USD) + " billed for its machines"
	case CostPriced:
		return USDText(c.USD) + " at " + USDText(c.PriceUSDPerHour) + "/h"
	}
	return "no cost: no price set (scavctl run --price USD-per-hour, or --machine-type from the price catalog)"
}

// USDText writes dollars as every view does: three significant digits
// below $100 ("$0.00067", "$0.0123", "$1.77"), whole dollars above.
func USDText(v float64) string {
	switch {
	case v > 0 && v < 1e-4:
		return "<$0.0001"
	case v < 100:
		return "$" + strconv.FormatFloat(v, 'g', 3, 64)
	case v < 1e6:
		return fmt.Sprintf("$%.0f", v)
	}
	return fmt.Sprintf("$%.3gM", v/1e6)
}
