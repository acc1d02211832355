package plugins

import (
	"context"
	"math"
	"time"
)

// Markets a machine is bought in (Config.Market).
const (
	MarketOnDemand = "on-demand"
	MarketSpot     = "spot"
)

// Offer is one machine type a launcher can acquire now, as its
// Capabilities report it.
type Offer struct {
	// Type names the machine type.
	Type string `json:"type"`
	// Slots is how many workers one machine of it takes.
	Slots int `json:"slots"`
	// OnDemandUSD is the $/hour of one machine on demand (0: not offered).
	OnDemandUSD float64 `json:"on_demand_usd,omitempty"`
	// SpotUSD is the $/hour of one spot machine now (0: no spot market, or
	// every zone of it is blocklisted for now after a pre-emption or a
	// capacity error).
	SpotUSD float64 `json:"spot_usd,omitempty"`
	// MinimumBillS is the fewest seconds a machine of it is billed once
	// bought (the provider's minimum; EC2: 60), however soon it is released.
	MinimumBillS float64 `json:"minimum_bill_s,omitempty"`
}

// Charge is what one machine a launcher acquired for a job costs: it is
// billed from Start until End (nil: it still runs) at USDPerHour, in units
// of Granularity with at least Minimum (the provider's rules; EC2: per
// second, 60 s at least).
type Charge struct {
	// Instance names the machine; Type, Zone and Market say what it is.
	Instance string `json:"instance"`
	Type     string `json:"type"`
	Zone     string `json:"zone,omitempty"`
	Market   string `json:"market"`
	// USDPerHour is its price.
	USDPerHour float64 `json:"usd_per_hour"`
	// Start and End bound its billed life (provisioned to terminated).
	Start time.Time  `json:"start"`
	End   *time.Time `json:"end,omitempty"`
	// Granularity and Minimum are the provider's billing rules (0: none).
	Granularity time.Duration `json:"granularity,omitempty"`
	Minimum     time.Duration `json:"minimum,omitempty"`
	// Prices are the changes of its price after Start, oldest first: a
	// spot machine is billed at the spot price in effect each second.
	Prices []PriceChange `json:"prices,omitempty"`
}

// PriceChange is a machine's price from At on.
type PriceChange struct {
	At         time.Time `json:"at"`
	USDPerHour float64   `json:"usd_per_hour"`
}

// PriceAt is the machine's $/hour at t.
func (c Charge) PriceAt(t time.Time) float64 {
	p := c.USDPerHour
	for _, ch := range c.Prices {
		if ch.At.After(t) {
			break
		}
		p = ch.USDPerHour
	}
	return p
}

// USDBetween is what running the machine from lo to hi costs at the
// prices in effect then (no rounding, no minimum).
func (c Charge) USDBetween(lo, hi time.Time) float64 {
	usd, at, p := 0.0, lo, c.PriceAt(lo)
	for _, ch := range c.Prices {
		if !ch.At.After(at) {
			continue
		}
		if !ch.At.Before(hi) {
			break
		}
		usd += ch.At.Sub(at).Seconds() / 3600 * p
		at, p = ch.At, ch.USDPerHour
	}
	if hi.After(at) {
		usd += hi.Sub(at).Seconds() / 3600 * p
	}
	return usd
}

// CostUSD is what the machine has cost by now: its life at the prices in
// effect, and, once it has ended, the rounding and minimum of its billing
// at its last price.
func (c Charge) CostUSD(now time.Time) float64 {
	end := now
	if c.End != nil {
		end = *c.End
	}
	usd := c.USDBetween(c.Start, end)
	if c.End != nil {
		life := c.Seconds(now)
		usd += (c.Billed(life) - life) / 3600 * c.PriceAt(end)
	}
	return usd
}

// Seconds is how long the machine has run by now (until End when it has ended).
func (c Charge) Seconds(now time.Time) float64 {
	end := now
	if c.End != nil {
		end = *c.End
	}
	return math.Max(end.Sub(c.Start).Seconds(), 0)
}

// Billed rounds s seconds of use up to the granularity and at least the
// minimum, as the provider bills them.
func (c Charge) Billed(s float64) float64 {
	if g := c.Granularity.Seconds(); g > 0 {
		s = math.Ceil(s/g-1e-9) * g
	}
	return math.Max(s, c.Minimum.Seconds())
}

// USD is what s billed seconds of the machine cost.
func (c Charge) USD(s float64) float64 { return s / 3600 * c.USDPerHour }

// Biller is implemented by launchers that acquire machines for a job and
// pay for them (cloudvm): the daemon asks what a job's machines cost, and
// tells the launcher when the job has ended so that it releases them at
// once. It is reached in process only; a launcher behind gRPC releases a
// job's machines once they have been idle for a while instead.
type Biller interface {
	// Charges lists the machines acquired for job, ended or running.
	Charges(ctx context.Context, job string) ([]Charge, error)
	// Release ends every machine of job: it has ended.
	Release(ctx context.Context, job string) error
}
