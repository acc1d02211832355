// Package allocs keeps the scheduler allocations a node's hooks report: a
// scheduler's prolog and epilog (`scavctl slurm prolog|epilog`) tell the
// node daemon when an allocation begins and ends on its node; jobs that
// `scavctl run` starts inside the allocation are tied to it, so that their
// telemetry can be found by the scheduler's job id, and the epilog stops any
// that outlive it. The records live in the allocation bucket.
package allocs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry/history"

	"github.com/nats-io/nats.go/jetstream"
)

// Store keeps the allocation records of this node's daemon.
type Store struct {
	// KV is the allocation bucket; Node names this node.
	KV   jetstream.KeyValue
	Node string
	// Stop asks a running job to stop with its own grace.
	Stop func(id string)
}

// Report records a hook's event and returns the allocation's record; the
// end of an allocation stops the jobs of it still running here.
func (as *Store) Report(ctx context.Context, ev api.AllocationEvent) (api.Allocation, error) {
	a := ev.Allocation
	if !api.ValidAllocationKey(a.Key()) {
		return api.Allocation{}, fmt.Errorf("%w: allocation %q: scheduler and id must be 1-64 letters, digits, '-' or '_'", api.ErrBadRequest, a.Key())
	}
	now := time.Now().UTC()
	var out api.Allocation
	err := as.update(ctx, a.Key(), func(cur *api.Allocation) {
		if cur.Scheduler == "" {
			*cur = api.Allocation{Scheduler: a.Scheduler, ID: a.ID}
		}
		cur.Node = as.Node
		keep(&cur.User, a.User)
		keep(&cur.Partition, a.Partition)
		keep(&cur.Nodes, a.Nodes)
		if a.UID != 0 {
			cur.UID = a.UID
		}
		switch ev.Event {
		case api.AllocationBegin:
			if cur.Started == nil {
				cur.Started = &now
			}
		case api.AllocationEnd:
			cur.Ended = &now
		}
		out = *cur
	})
	if err != nil {
		return api.Allocation{}, err
	}
	if ev.Event == api.AllocationEnd {
		for _, id := range out.Jobs {
			as.Stop(id)
		}
	}
	return out, nil
}

// Attach ties job id to the allocation key, creating its record when no
// prolog reported it (the hooks are optional).
func (as *Store) Attach(ctx context.Context, key, id string) error {
	scheduler, allocID, _ := strings.Cut(key, ".")
	return as.update(ctx, key, func(cur *api.Allocation) {
		if cur.Scheduler == "" {
			*cur = api.Allocation{Scheduler: scheduler, ID: allocID, Node: as.Node}
		}
		if !slices.Contains(cur.Jobs, id) {
			cur.Jobs = append(cur.Jobs, id)
		}
	})
}

// update applies f to the record of key (a zero api.Allocation when there is
// none) and writes it back, retrying when another writer got there first.
func (as *Store) update(ctx context.Context, key string, f func(*api.Allocation)) error {
	for try := 0; ; try++ {
		var cur api.Allocation
		var rev uint64
		e, err := as.KV.Get(ctx, key)
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
			_, err = as.KV.Create(ctx, key, b)
		} else {
			_, err = as.KV.Update(ctx, key, b, rev)
		}
		if err == nil {
			return nil
		}
		if try == 4 || !(errors.Is(err, jetstream.ErrKeyExists) || history.KVConflict(err)) {
			return fmt.Errorf("write allocation %s: %w", key, err)
		}
	}
}

// List returns every allocation record, newest first.
func (as *Store) List(ctx context.Context) ([]api.Allocation, error) {
	keys, err := as.KV.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list allocations: %w", err)
	}
	out := []api.Allocation{}
	for k := range keys.Keys() {
		e, err := as.KV.Get(ctx, k)
		if err != nil {
			continue // deleted between list and get
		}
		var a api.Allocation
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
