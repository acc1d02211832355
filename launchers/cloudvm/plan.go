package cloudvm

import (
	"slices"
	"time"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

// held is what the planner needs to know of an instance of a pool.
type held struct {
	ID, Type, Market string
	Launched         time.Time
	// Doomed: a notice came for it (or it is gone): it is not reused.
	Doomed bool
}

// want is what an attempt needs: n instances of a type in a market.
type want struct {
	Type, Market string
	N            int
}

// poolPlan is how a pool changes for an attempt. The surplus of the type
// wanted and the doomed instances are released at once (ReleaseNow); the
// instances of another type (or market) only once the attempt has started
// on the new ones (ReleaseAfter), so that a relaunch whose new instances
// cannot be had goes back to the old ones — unless keeping them would put
// the pool over its limit, in which case they are released at once too.
type poolPlan struct {
	Keep         []string
	Add          int
	ReleaseNow   []string
	ReleaseAfter []string
}

// planPool decides which instances of a pool an attempt keeps, how many it
// adds and which it releases (see poolPlan). Instances of the type wanted
// are reused, the oldest first (the paper: "existing VMs are always reused,
// to avoid excessive VM churn"); a spot request also reuses on-demand
// instances of the type (the fallback it got before), the exact market
// first. limit bounds the instances the pool holds at once (0: none).
func planPool(pool []held, w want, limit int) poolPlan {
	usable := func(h held) int { // 0: not usable; 1: exact; 2: fallback
		switch {
		case h.Doomed || h.Type != w.Type:
			return 0
		case h.Market == w.Market:
			return 1
		case w.Market == provider.Spot && h.Market == provider.OnDemand:
			return 2
		}
		return 0
	}
	var cands []held
	for _, h := range pool {
		if usable(h) > 0 {
			cands = append(cands, h)
		}
	}
	slices.SortStableFunc(cands, func(a, b held) int {
		if ua, ub := usable(a), usable(b); ua != ub {
			return ua - ub
		}
		return a.Launched.Compare(b.Launched)
	})
	var p poolPlan
	kept := map[string]bool{}
	for _, h := range cands[:min(len(cands), w.N)] {
		p.Keep = append(p.Keep, h.ID)
		kept[h.ID] = true
	}
	p.Add = w.N - len(p.Keep)
	for _, h := range pool {
		switch {
		case kept[h.ID]:
		case h.Doomed || usable(h) > 0:
			p.ReleaseNow = append(p.ReleaseNow, h.ID)
		default:
			p.ReleaseAfter = append(p.ReleaseAfter, h.ID)
		}
	}
	if limit > 0 && len(p.Keep)+p.Add+len(p.ReleaseAfter) > limit {
		p.ReleaseNow = append(p.ReleaseNow, p.ReleaseAfter...)
		p.ReleaseAfter = nil
	}
	return p
}

// instancesFor is how many instances of slots workers each K workers need
// (⌈K/slots⌉); a self-launching command runs once, on one instance.
func instancesFor(workers, slots int, self bool) int {
	if self {
		return 1
	}
	slots = max(slots, 1)
	return (workers + slots - 1) / slots
}
