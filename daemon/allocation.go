package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A scheduler's prolog and epilog hooks (`scavctl slurm prolog|epilog`) tell
// the node daemon when an allocation begins and ends on its node; jobs that
// `scavctl run` starts inside the allocation are tied to it, so that their
// telemetry can be found by the scheduler's job id, and the epilog stops
// any that outlive it.

// allocations keeps the allocation records of this node's daemon.
type allocations struct {
	kv   jetstream.KeyValue
	node string
	// stop asks a running job to stop with its own grace.
	stop func(id string)
}

// report records a hook's event and returns the allocation's record; the
// end of an allocation stops the jobs of it still running here.
func (as *allocations) report(ctx context.Context, ev AllocationEvent) (Allocation, error) {
	a := ev.Allocation
	if !ValidAllocationKey(a.Key()) {
		return Allocation{}, fmt.Errorf("%w: allocation %q: scheduler and id must be 1-64 letters, digits, '-' or '_'", ErrBadRequest, a.Key())
	}
	now := time.Now().UTC()
	var out Allocation
	err := as.update(ctx, a.Key(), func(cur *Allocation) {
		if cur.Scheduler == "" {
			*cur = Allocation{Scheduler: a.Scheduler, ID: a.ID}
		}
		cur.Node = as.node
		keep(&cur.User, a.User)
		keep(&cur.Partition, a.Partition)
		keep(&cur.Nodes, a.Nodes)
		if a.UID != 0 {
			cur.UID = a.UID
		}
		switch ev.Event {
		case AllocationBegin:
			if cur.Started == nil {
				cur.Started = &now
			}
		case AllocationEnd:
			cur.Ended = &now
		}
		out = *cur
	})
	if err != nil {
		return Allocation{}, err
	}
	if ev.Event == AllocationEnd {
		for _, id := range out.Jobs {
			as.stop(id)
		}
	}
	return out, nil
}

// attach ties job id to the allocation key, creating its record when no
// prolog reported it (the hooks are optional).
func (as *allocations) attach(ctx context.Context, key, id string) error {
	scheduler, allocID, _ := strings.Cut(key, ".")
	return as.update(ctx, key, func(cur *Allocation) {
		if cur.Scheduler == "" {
			*cur = Allocation{Scheduler: scheduler, ID: allocID, Node: as.node}
		}
		if !slices.Contains(cur.Jobs, id) {
			cur.Jobs = append(cur.Jobs, id)
		}
	})
}

// update applies f to the record of key (a zero Allocation when there is
// none) and writes it back, retrying when another writer got there first.
func (as *allocations) update(ctx context.Context, key string, f func(*Allocation)) error {
	for try := 0; ; try++ {
		var cur Allocation
		var rev uint64
		e, err := as.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("read allocation %s: %w", key, err)
		default:
			if err := json.Unmarshal(e.Value(), &cur); err != nil {
				return fmt.Errorf("decode allocation %s: %w", key, err)
			}
			rev = e.Revision()
		}
		f(&cur)
		b, err := json.Marshal(cur)
		if err != nil {
			return fmt.Errorf("encode allocation %s: %w", key, err)
		}
		if rev == 0 {
			_, err = as.kv.Create(ctx, key, b)
		} else {
			_, err = as.kv.Update(ctx, key, b, rev)
		}
		if err == nil {
			return nil
		}
		if try == 4 || !(errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err)) {
			return fmt.Errorf("write allocation %s: %w", key, err)
		}
	}
}

// isWrongSequence reports a compare-and-set conflict of a key-value update.
func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// list returns every allocation record, newest first.
func (as *allocations) list(ctx context.Context) ([]Allocation, error) {
	keys, err := as.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list allocations: %w", err)
	}
	out := []Allocation{}
	for k := range keys.Keys() {
		e, err := as.kv.Get(ctx, k)
		if err != nil {
			continue // deleted between list and get
		}
		var a Allocation
		if json.Unmarshal(e.Value(), &a) == nil {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ti, tj := out[i].Started, out[j].Started
		if ti == nil || tj == nil {
			return ti != nil
		}
		return ti.After(*tj)
	})
	return out, nil
}

// keep sets *dst to src unless src is empty.
func keep(dst *string, src string) {
	if src != "" {
		*dst = src
	}
}
