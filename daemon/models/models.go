// Package models is the model store: what jobs under a policy measured of
// their command, kept in a JetStream key-value bucket per owner, job
// signature (api.Signature) and machine type, so that a later job of the
// same signature starts from it (optimizer/prior) and jobs of other
// signatures learn from it how machine types compare. The daemon's
// controllers read a job's prior from it when the job starts and save what
// the job learnt (Prior, Save); the API lists and forgets entries, each
// owner only their own (List, Forget).
//
// An entry is small and bounded: a type's measured configurations (at most
// maxPoints), the noise curve thinned to 64 points, the 16 newest
// relaunches; and an owner holds at most MaxPerOwner entries (the least
// recently updated go first).
package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/optimizer/prior"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// Bucket is the model store's key-value bucket.
const Bucket = telemetry.ModelBucket

// MaxPerOwner bounds the entries one owner holds.
const MaxPerOwner = 512

// maxPoints bounds the configurations one entry keeps (the most measured).
const maxPoints = 256

// Store is the model store.
type Store struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

// New is the model store over its bucket (history.Store.Models): each
// entry bounded, and MaxPerOwner entries an owner.
func New(kv jetstream.KeyValue) *Store { return &Store{kv: kv, now: time.Now} }

// token is what a key's part may be.
var token = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// key is the entry's key: UID.SIGNATURE.TYPE, the type hex-encoded when it
// holds characters a key may not ("x" and its bytes).
func key(uid uint32, sig, typ string) (string, error) {
	if !token.MatchString(sig) {
		return "", fmt.Errorf("model store key: %w: signature %q", api.ErrBadRequest, sig)
	}
	t := typ
	if !token.MatchString(strings.ReplaceAll(typ, ".", "_")) || strings.HasPrefix(typ, ".") || strings.HasSuffix(typ, ".") || strings.Contains(typ, "..") {
		t = fmt.Sprintf("x%x", typ)
	}
	if typ == "" {
		return "", fmt.Errorf("model store key: %w: no machine type", api.ErrBadRequest)
	}
	return fmt.Sprintf("%d.%s.%s", uid, sig, t), nil
}

// Prior is the prior of a job of owner uid with signature sig: sig's
// entries and, for the speed ratios between types, the owner's others.
func (s *Store) Prior(ctx context.Context, uid uint32, sig string) (*prior.Prior, error) {
	es, err := s.list(ctx, fmt.Sprintf("%d.>", uid))
	if err != nil {
		return nil, err
	}
	var ps []prior.Entry
	for _, e := range es {
		ps = append(ps, toPrior(e))
	}
	return prior.For(sig, ps), nil
}

// Save merges what job (of owner, with signature sig named after key)
// learnt into its entries, one per machine type it measured.
func (s *Store) Save(ctx context.Context, owner api.Owner, sig, keyText, job string, l prior.Learned) error {
	for _, e := range prior.Entries(sig, l, nil) {
		k, err := key(owner.UID, sig, e.Type)
		if err != nil {
			return err
		}
		if err := s.update(ctx, k, func(old *api.ModelEntry) api.ModelEntry {
			// What the jobs before this one left: a job saves as it
			// goes, and its newest saving replaces its earlier ones.
			var before *api.ModelEntry
			if old != nil && old.Job == job {
				before = old.Earlier
			} else if old != nil {
				o := *old
				o.Earlier = nil
				before = &o
			}
			n := fromPrior(e)
			if before != nil {
				n = fromPrior(prior.Merge(toPrior(*before), e))
				n.Jobs = before.Jobs
			}
			n.Earlier = before
			n.UID, n.User, n.Key, n.Job, n.Updated = owner.UID, owner.User, keyText, job, s.now().UTC()
			n.Jobs++
			if len(n.Points) > maxPoints {
				sort.SliceStable(n.Points, func(i, j int) bool { return n.Points[i].Steps > n.Points[j].Steps })
				n.Points = n.Points[:maxPoints]
			}
			return n
		}); err != nil {
			return fmt.Errorf("save model %s: %w", k, err)
		}
	}
	return s.bound(ctx, owner.UID)
}

// update writes the entry at k that change makes of the one there (nil:
// none), again when another writer got there first.
func (s *Store) update(ctx context.Context, k string, change func(old *api.ModelEntry) api.ModelEntry) error {
	for try := 0; ; try++ {
		var old *api.ModelEntry
		var rev uint64
		got, err := s.kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			var e api.ModelEntry
			if json.Unmarshal(got.Value(), &e) == nil {
				old = &e
			}
			rev = got.Revision()
		}
		b, err := json.Marshal(change(old))
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, k, b)
		} else {
			_, err = s.kv.Update(ctx, k, b, rev)
		}
		if err == nil || try >= 5 || !(errors.Is(err, jetstream.ErrKeyExists) || strings.Contains(err.Error(), "wrong last sequence")) {
			return err
		}
	}
}

// bound keeps uid's entries within MaxPerOwner, the least recently
// updated going first.
func (s *Store) bound(ctx context.Context, uid uint32) error {
	es, err := s.list(ctx, fmt.Sprintf("%d.>", uid))
	if err != nil || len(es) <= MaxPerOwner {
		return err
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Updated.Before(es[j].Updated) })
	for _, e := range es[:len(es)-MaxPerOwner] {
		k, err := key(e.UID, e.Signature, e.Type)
		if err != nil {
			continue
		}
		if err := s.kv.Purge(ctx, k); err != nil {
			return fmt.Errorf("bound the model store of uid %d: %w", uid, err)
		}
	}
	return nil
}

// List returns the entries of uid (every owner's when uid is nil), of
// signature sig only when it is not empty, by owner, signature and type.
func (s *Store) List(ctx context.Context, uid *uint32, sig string) ([]api.ModelEntry, error) {
	filter := ">"
	if uid != nil {
		filter = strconv.FormatUint(uint64(*uid), 10) + ".>"
	}
	es, err := s.list(ctx, filter)
	if err != nil {
		return nil, err
	}
	out := es[:0]
	for _, e := range es {
		if sig == "" || e.Signature == sig {
			out = append(out, e)
		}
	}
	return out, nil
}

func (s *Store) list(ctx context.Context, filter string) ([]api.ModelEntry, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	var keys []string
	for k := range lister.Keys() { // closed once every key is listed (the watcher stops itself)
		keys = append(keys, k)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	out := []api.ModelEntry{}
	for _, k := range keys {
		got, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read model %s: %w", k, err)
		}
		var e api.ModelEntry
		if err := json.Unmarshal(got.Value(), &e); err != nil {
			continue // not ours to read: left alone
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.UID != b.UID {
			return a.UID < b.UID
		}
		if a.Signature != b.Signature {
			return a.Signature < b.Signature
		}
		return a.Type < b.Type
	})
	return out, nil
}

// Forget removes uid's entries of signature sig (of type typ only, when
// set) and returns how many.
func (s *Store) Forget(ctx context.Context, uid uint32, sig, typ string) (int, error) {
	if !token.MatchString(sig) {
		return 0, fmt.Errorf("forget model: %w: signature %q", api.ErrBadRequest, sig)
	}
	es, err := s.List(ctx, &uid, sig)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range es {
		if typ != "" && e.Type != typ {
			continue
		}
		k, err := key(uid, e.Signature, e.Type)
		if err != nil {
			return n, err
		}
		if err := s.kv.Purge(ctx, k); err != nil {
			return n, fmt.Errorf("forget model %s: %w", k, err)
		}
		n++
	}
	return n, nil
}

func toPrior(e api.ModelEntry) prior.Entry {
	p := prior.Entry{Signature: e.Signature, Type: e.Type, RelaunchS: e.RelaunchS}
	for _, q := range e.Points {
		p.Points = append(p.Points, prior.Point{Nodes: q.Nodes, Replicas: q.Replicas, LocalBatch: q.LocalBatch, StepS: q.StepS, SyncS: q.SyncS, Steps: q.Steps})
	}
	for _, n := range e.Noise {
		p.Noise = append(p.Noise, prior.NoisePoint{Samples: n.Samples, Phi: n.Phi})
	}
	return p
}

func fromPrior(p prior.Entry) api.ModelEntry {
	e := api.ModelEntry{Signature: p.Signature, Type: p.Type, RelaunchS: p.RelaunchS}
	for _, q := range p.Points {
		e.Points = append(e.Points, api.ModelPoint{Nodes: q.Nodes, Replicas: q.Replicas, LocalBatch: q.LocalBatch, StepS: q.StepS, SyncS: q.SyncS, Steps: q.Steps})
	}
	for _, n := range p.Noise {
		e.Noise = append(e.Noise, api.ModelNoise{Samples: n.Samples, Phi: n.Phi})
	}
	return e
}
