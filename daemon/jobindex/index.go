// Package jobindex keeps the job index: one summary per job
// (api.JobSummary) in a key-value bucket, and each daemon's view of it in
// memory, kept current by watching the bucket. A job's runner writes its
// summary when it writes its record (daemon/jobs: the record first, with
// its revision check, then the summary), so the index says what the records
// say. Listing, filtering and paging jobs, naming one (id, id prefix or
// name), finding the unfinished jobs of a node and the finished ones
// retention removes all read the view: they cost what they return, not a
// read of every record.
//
// The bucket also holds the marks of `scavctl keep` (key "kept.<job>": job
// ids hold no dot). A store that predates the index gets its summaries
// written when a daemon opens it (Open).
package jobindex

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

const (
	keptPrefix = "kept."
	// writeTimeout bounds one write to the bucket.
	writeTimeout = 5 * time.Second
)

// Index is a daemon's view of the job index.
type Index struct {
	kv  jetstream.KeyValue
	log *zap.Logger

	mu    sync.RWMutex
	byID  map[string]*entry
	order []*entry          // by creation, then id (api.JobSummary.Before)
	kept  map[string]uint64 // the kept jobs, with their mark's revision
	// owners and words are what the summaries share (compact).
	owners map[ownerKey]*api.Owner
	words  map[string]string

	watcher jetstream.KeyWatcher
	done    chan struct{}
}

// entry is one job's summary with its revision in the bucket.
type entry struct {
	s   api.JobSummary
	rev uint64
}

// Open watches the index bucket kv and returns once the view holds every
// summary in it. The records of records that have no summary (a store
// written before the index existed) get theirs first. Close stops the watch.
func Open(ctx context.Context, kv, records jetstream.KeyValue, log *zap.Logger) (*Index, error) {
	began := time.Now()
	x := &Index{kv: kv, log: log, byID: map[string]*entry{}, kept: map[string]uint64{}, done: make(chan struct{}),
		owners: map[ownerKey]*api.Owner{}, words: map[string]string{}}
	w, err := kv.WatchAll(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("watch the job index: %w", err)
	}
	x.watcher = w
	loaded := make(chan struct{})
	go x.follow(loaded) // joined by Close
	select {
	case <-loaded:
	case <-ctx.Done():
		x.Close()
		return nil, fmt.Errorf("read the job index: %w", ctx.Err())
	}
	read := time.Since(began)
	if err := x.build(ctx, records); err != nil {
		x.Close()
		return nil, err
	}
	log.Debug("job index open", zap.Int("jobs", x.Len()), zap.Duration("read", read), zap.Duration("took", time.Since(began)))
	return x, nil
}

// follow applies the watch's entries to the view until the watch stops;
// loaded is closed once the entries that existed at the start are in.
func (x *Index) follow(loaded chan struct{}) {
	defer close(x.done)
	first := true
	for e := range x.watcher.Updates() {
		if e == nil {
			if first {
				first = false
				close(loaded)
			}
			continue
		}
		x.apply(e)
	}
	if first {
		close(loaded)
	}
}

// Close stops the watch and waits for it.
func (x *Index) Close() {
	_ = x.watcher.Stop()
	<-x.done
}

// apply takes one entry of the watch: a summary, a keep mark, or the
// deletion of one, unless the view has a newer one already.
func (x *Index) apply(e jetstream.KeyValueEntry) {
	key, deleted := e.Key(), e.Operation() != jetstream.KeyValuePut
	if id, ok := strings.CutPrefix(key, keptPrefix); ok {
		x.mu.Lock()
		defer x.mu.Unlock()
		if deleted {
			delete(x.kept, id)
		} else {
			x.kept[id] = e.Revision()
		}
		x.setKept(id)
		return
	}
	if strings.Contains(key, ".") {
		return // meta keys
	}
	if deleted {
		x.remove(key, e.Revision())
		return
	}
	s, err := decode(e.Value())
	if err != nil || s.ID != key {
		x.log.Warn("a job summary the index cannot read; it is left out", zap.String("job", key), zap.Error(err))
		return
	}
	x.put(s, e.Revision())
}

// put sets a job's summary at revision rev, unless the view has a newer one.
func (x *Index) put(s api.JobSummary, rev uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.compact(&s)
	if old := x.byID[s.ID]; old != nil {
		if old.rev >= rev {
			return
		}
		s.Kept = x.kept[s.ID] > 0
		old.s, old.rev = s, rev // a job's creation time does not change
		return
	}
	s.Kept = x.kept[s.ID] > 0
	e := &entry{s: s, rev: rev}
	x.byID[s.ID] = e
	i := sort.Search(len(x.order), func(i int) bool { return s.Before(x.order[i].s) })
	x.order = append(x.order, nil)
	copy(x.order[i+1:], x.order[i:])
	x.order[i] = e
}

// maxWords bounds the strings the view shares; past it, new ones are not
// shared (a history of distinct names, say).
const maxWords = 4096

// compact makes s share what many summaries repeat with the ones in the
// view: its owner, and its name, node, launcher, state, phase,
// configuration's words and command's words (a summary decoded from JSON
// has copies of its own); x.mu is held.
func (x *Index) compact(s *api.JobSummary) {
	word := func(p *string) {
		if w, ok := x.words[*p]; ok {
			*p = w
		} else if len(x.words) < maxWords {
			x.words[*p] = *p
		}
	}
	for _, p := range []*string{&s.Name, &s.Node, &s.Launcher, (*string)(&s.State), (*string)(&s.Phase), &s.Config.MachineType, (*string)(&s.Config.Market)} {
		word(p)
	}
	for i := range s.Command {
		word(&s.Command[i])
	}
	if s.Owner != nil {
		k := ownerKey{s.Owner.UID, s.Owner.GID, s.Owner.User}
		if o, ok := x.owners[k]; ok {
			s.Owner = o
		} else if len(x.owners) < maxWords {
			x.owners[k] = s.Owner
		}
	}
}

// ownerKey is what a summary keeps of its owner.
type ownerKey struct {
	uid, gid uint32
	user     string
}

// remove drops a job's summary deleted at revision rev, unless the view has
// a newer one.
func (x *Index) remove(id string, rev uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.byID[id]
	if e == nil || e.rev > rev {
		return
	}
	delete(x.byID, id)
	i := sort.Search(len(x.order), func(i int) bool { return !x.order[i].s.Before(e.s) })
	for ; i < len(x.order); i++ {
		if x.order[i] == e {
			x.order = append(x.order[:i], x.order[i+1:]...)
			return
		}
	}
}

// setKept copies a job's keep mark into its summary; x.mu is held.
func (x *Index) setKept(id string) {
	if e := x.byID[id]; e != nil {
		e.s.Kept = x.kept[id] > 0
	}
}

// Put writes job s's summary into the bucket and the view. Its runner
// calls it, and only its runner: the write is made at the revision the
// view last saw (a Create for a new job), and a write found in between is
// logged, then written over (the runner has just written the record it
// summarises).
func (x *Index) Put(ctx context.Context, s api.JobSummary) error {
	b := encode(s)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	x.mu.RLock()
	var last uint64
	if e := x.byID[s.ID]; e != nil {
		last = e.rev
	}
	x.mu.RUnlock()
	rev, err := x.write(ctx, s.ID, b, last)
	if history.KVConflict(err) {
		x.log.Warn("the job's summary changed under its writer; writing it over", zap.String("job", s.ID), zap.Uint64("revision", last))
		var cur jetstream.KeyValueEntry
		if cur, err = x.kv.Get(ctx, s.ID); err == nil {
			rev, err = x.kv.Update(ctx, s.ID, b, cur.Revision())
		} else if errors.Is(err, jetstream.ErrKeyNotFound) {
			rev, err = x.kv.Create(ctx, s.ID, b)
		}
	}
	if err != nil {
		return fmt.Errorf("write the summary of job %s: %w", s.ID, err)
	}
	x.put(s, rev)
	return nil
}

// write creates key (last 0) or updates it at revision last.
func (x *Index) write(ctx context.Context, key string, b []byte, last uint64) (uint64, error) {
	if last == 0 {
		return x.kv.Create(ctx, key, b)
	}
	return x.kv.Update(ctx, key, b, last)
}

// Delete removes job id's summary and keep mark from the bucket and the view.
func (x *Index) Delete(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if err := x.kv.Purge(ctx, id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("remove job %s from the index: %w", id, err)
	}
	if err := x.kv.Purge(ctx, keptPrefix+id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("remove the keep mark of job %s: %w", id, err)
	}
	x.mu.Lock()
	e := x.byID[id]
	rev := uint64(0)
	if e != nil {
		rev = e.rev
	}
	delete(x.kept, id)
	x.mu.Unlock()
	if e != nil {
		x.remove(id, rev)
	}
	return nil
}

// Keep sets (undo: clears) job id's keep mark: retention leaves a kept job
// alone.
func (x *Index) Keep(ctx context.Context, id string, undo bool) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	key := keptPrefix + id
	if undo {
		if err := x.kv.Purge(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("clear the keep mark of job %s: %w", id, err)
		}
		x.mu.Lock()
		delete(x.kept, id)
		x.setKept(id)
		x.mu.Unlock()
		return nil
	}
	rev, err := x.kv.Put(ctx, key, []byte(time.Now().UTC().Format(time.RFC3339)))
	if err != nil {
		return fmt.Errorf("keep job %s: %w", id, err)
	}
	x.mu.Lock()
	x.kept[id] = rev
	x.setKept(id)
	x.mu.Unlock()
	return nil
}

// Get returns job id's summary.
func (x *Index) Get(id string) (api.JobSummary, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e := x.byID[id]
	if e == nil {
		return api.JobSummary{}, false
	}
	return e.s, true
}

// Len is the number of jobs in the index.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.order)
}
