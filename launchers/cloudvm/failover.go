package cloudvm

import (
	"time"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

// offering is one place an instance type can be bought: a zone and a market.
type offering struct {
	Type, Zone, Market string
}

// blocklist remembers the offerings that failed (no capacity) or were
// reclaimed (a spot interruption), until when each is avoided. It is pure:
// the caller gives the time.
type blocklist map[offering]time.Time

// add blocks o until now+d (extending an earlier block, never shortening it).
func (b blocklist) add(o offering, now time.Time, d time.Duration) {
	if until := now.Add(d); until.After(b[o]) {
		b[o] = until
	}
}

// blocked reports whether o is blocked at now.
func (b blocklist) blocked(o offering, now time.Time) bool { return now.Before(b[o]) }

// expire forgets the blocks over at now.
func (b blocklist) expire(now time.Time) {
	for o, until := range b {
		if !now.Before(until) {
			delete(b, o)
		}
	}
}

// failover lists where to try to provision typ, in order: every zone of
// the market asked for, then — for spot, when fallback allows — every
// zone on demand; offerings blocked at now are left out. An empty list
// means there is nowhere to try now.
func failover(typ, market string, zones []string, fallback bool, b blocklist, now time.Time) []offering {
	markets := []string{market}
	if market == provider.Spot && fallback {
		markets = append(markets, provider.OnDemand)
	}
	var out []offering
	for _, m := range markets {
		for _, z := range zones {
			o := offering{Type: typ, Zone: z, Market: m}
			if !b.blocked(o, now) {
				out = append(out, o)
			}
		}
	}
	return out
}
