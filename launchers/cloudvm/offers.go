package cloudvm

import (
	"context"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/plugins"
)

// priceCache keeps the provider's prices for DefaultPriceCacheTime.
type priceCache struct {
	at     time.Time
	prices []provider.Price
}

// currentPrices returns the provider's prices of the launcher's types,
// asking it at most once per DefaultPriceCacheTime.
func (l *Launcher) currentPrices(ctx context.Context) ([]provider.Price, error) {
	l.mu.Lock()
	pc := l.prices
	l.mu.Unlock()
	if !pc.at.IsZero() && time.Since(pc.at) < DefaultPriceCacheTime {
		return pc.prices, nil
	}
	prices, err := retry(ctx, l, "prices", func() ([]provider.Price, error) { return l.o.Provider.Prices(ctx, l.o.Types) })
	if err != nil {
		if pc.prices != nil {
			l.log.Warn("prices: using the last known", zap.Time("from", pc.at), zap.Error(err))
			return pc.prices, nil
		}
		return nil, err
	}
	now := time.Now()
	l.mu.Lock()
	l.prices = priceCache{at: now, prices: prices}
	pools := slices.Collect(maps.Values(l.pools))
	l.mu.Unlock()
	for _, p := range pools {
		p.notePrices(prices, now.UTC())
	}
	return prices, nil
}

// priceOf is the $/hour of o among prices (0: unknown). On-demand prices
// are per type (any zone); spot prices per zone.
func priceOf(prices []provider.Price, o offering) float64 {
	for _, p := range prices {
		if p.Type == o.Type && p.Market == o.Market && (o.Market == provider.OnDemand || p.Zone == o.Zone) {
			return p.USDPerHour
		}
	}
	return 0
}

// offers are the launcher's types with their slots and their prices now,
// leaving out what is blocklisted (see Capabilities).
func (l *Launcher) offers(ctx context.Context) ([]plugins.Offer, error) {
	prices, err := l.currentPrices(ctx)
	if err != nil {
		return nil, err
	}
	out := offersAt(l.o.Types, l.types, l.zones, prices, l.blockSnapshot(), time.Now())
	minimum := l.o.Provider.Billing().Minimum.Seconds()
	for i := range out {
		out[i].MinimumBillS = minimum
	}
	return out, nil
}

// offersAt is offers' pure part.
func offersAt(types []string, info map[string]provider.InstanceType, zones func(provider.InstanceType) []string,
	prices []provider.Price, b blocklist, now time.Time) []plugins.Offer {
	var out []plugins.Offer
	for _, name := range types {
		t := info[name]
		off := plugins.Offer{Type: name, Slots: max(t.Slots, 1)}
		for _, z := range zones(t) {
			if od := (offering{name, z, provider.OnDemand}); !b.blocked(od, now) {
				off.OnDemandUSD = priceOf(prices, od)
			}
			sp := offering{name, z, provider.Spot}
			if p := priceOf(prices, sp); t.Spot && p > 0 && !b.blocked(sp, now) && (off.SpotUSD == 0 || p < off.SpotUSD) {
				off.SpotUSD = p
			}
		}
		out = append(out, off)
	}
	return out
}

// blockSnapshot copies the blocklist.
func (l *Launcher) blockSnapshot() blocklist {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.block.expire(time.Now())
	out := make(blocklist, len(l.block))
	for o, t := range l.block {
		out[o] = t
	}
	return out
}

// blockOffering blocklists o for Options.Blocklist.
func (l *Launcher) blockOffering(o offering, why string) {
	l.mu.Lock()
	l.block.add(o, time.Now(), l.o.Blocklist)
	l.mu.Unlock()
	l.log.Warn("blocklisted", zap.String("offering", o.Type+"/"+o.Zone+"/"+o.Market), zap.String("why", why), zap.Duration("for", l.o.Blocklist))
}
