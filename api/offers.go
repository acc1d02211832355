package api

import (
	"context"

	"github.com/scavenger-ml/scavenger/plugins"
)

// VerbOffers asks what the daemon's launcher offers now: the machine types
// a cloud launcher can acquire, with their prices (scavctl plan --launcher
// cloudvm, scavctl prices --live --provider local).
const VerbOffers = "offers"

// Offers is what a daemon's launcher offers now.
type Offers struct {
	// Launcher names it; MaxWorkers is the most workers an attempt can have.
	Launcher   string `json:"launcher"`
	MaxWorkers int    `json:"max_workers"`
	// Offers are the machine types it can acquire now (none: a launcher
	// that acquires no machines), without what is blocklisted.
	Offers []plugins.Offer `json:"offers"`
}

// Offers reads what the daemon's launcher offers now.
func (c *Client) Offers(ctx context.Context) (Offers, error) {
	var o Offers
	return o, c.call(ctx, VerbOffers, struct{}{}, &o)
}
