// Package aggregates keeps each job's step digest: what its step records
// add up to (a stepstats.Aggregate), as of a sequence of the step stream, in
// a key-value bucket keyed by job id. While a job runs, the daemon of its
// node folds each step message the job's runner reads, and saves the
// digest every SaveEvery and when the job ends (Follow). A reader gets the saved digest with the
// records stored after it folded in (Current): what it reads is up to
// date, and costs the records of the last few seconds, not the job's
// history. `scavctl steps --summary`, `report` and `top` read
// it; `steps --last N` finds where the last N records start with its marks.
//
// A digest is a left fold of the job's step messages in the stream's order:
// whoever folds the same messages gets the same digest, so a save needs no
// owner. Each save is made at the revision its writer read and never
// carries the digest back to an older sequence.
package aggregates

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/stepstats"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

const (
	// DefaultSaveEvery is how often a followed job's digest is saved.
	DefaultSaveEvery = 10 * time.Second
	// writeBackAfter is how many messages a reader folds before it saves
	// the digest of a job nobody follows (one that ended).
	writeBackAfter = 64
	// markEvery is how many records apart the marks are; maxMarks bounds them.
	markEvery = 512
	maxMarks  = 256
	// ioTimeout bounds one read or write of the bucket.
	ioTimeout = 5 * time.Second
)

// Store keeps the step digests of the jobs.
type Store struct {
	JS  jetstream.JetStream
	KV  jetstream.KeyValue
	Log *zap.Logger
	// SaveEvery is how often Follow saves (0: DefaultSaveEvery).
	SaveEvery time.Duration
}

// Digest is a job's step digest as the bucket holds it.
type Digest struct {
	// Seq is the stream sequence of the newest message folded in; Total
	// counts the records (lines) of every message folded in.
	Seq   uint64 `json:"seq"`
	Total int64  `json:"total"`
	// Marks are where the newest records start (Start).
	Marks []Mark              `json:"marks,omitempty"`
	Agg   stepstats.Aggregate `json:"agg"`
}

// Mark says that the message at Seq starts after Before records.
type Mark struct {
	Seq    uint64 `json:"seq"`
	Before int64  `json:"before"`
}

// newDigest is the empty digest of job j.
func newDigest(j api.Job) Digest {
	return Digest{Agg: stepstats.NewAggregate(float64(j.BaseBatch()))}
}

// fold adds the step message at seq.
func (d *Digest) fold(seq uint64, data []byte) {
	if seq <= d.Seq {
		return
	}
	recs, bad := telemetry.DecodeBatch(data)
	d.add(seq, recs, bad)
}

// add adds the step message at seq, decoded: its records and the number of
// its lines that did not decode.
func (d *Digest) add(seq uint64, recs []telemetry.StepRecord, bad int) {
	if seq <= d.Seq {
		return
	}
	if n := len(d.Marks); n == 0 || d.Total-d.Marks[n-1].Before >= markEvery {
		d.Marks = append(d.Marks, Mark{Seq: seq, Before: d.Total})
		if len(d.Marks) > maxMarks {
			d.Marks = d.Marks[1:]
		}
	}
	for _, r := range recs {
		d.Agg.Add(r)
	}
	d.Total += int64(len(recs) + bad) // lines, as a replay that leaves some out counts them
	d.Seq = seq
}

// Start is where a replay of the job's last n records starts: the stream
// sequence to read from (0: the first) and how many records to skip there.
func (d *Digest) Start(n int64) (after uint64, skip int64) {
	want := d.Total - n // the records before the last n
	if want <= 0 {
		return 0, 0
	}
	for i := len(d.Marks) - 1; i >= 0; i-- {
		if m := d.Marks[i]; m.Before <= want {
			return m.Seq - 1, want - m.Before
		}
	}
	return 0, want
}

// load reads job id's digest and its revision (0: none yet).
func (s *Store) load(ctx context.Context, j api.Job) (Digest, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, ioTimeout)
	defer cancel()
	e, err := s.KV.Get(ctx, j.ID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return newDigest(j), 0, nil
	}
	if err != nil {
		return Digest{}, 0, fmt.Errorf("read the step digest of %s: %w", j.ID, err)
	}
	var d Digest
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		s.Log.Warn("a step digest that does not decode; folding the job's steps again", zap.String("job", j.ID), zap.Error(err))
		return newDigest(j), e.Revision(), nil
	}
	return d, e.Revision(), nil
}

// save writes job id's digest at revision rev (0: a new one) and returns
// the new revision.
func (s *Store) save(ctx context.Context, id string, d *Digest, rev uint64) (uint64, error) {
	b, err := d.encode(id)
	if err != nil {
		return rev, err
	}
	return s.write(ctx, id, b, rev)
}

// encode is job id's digest d as the bucket holds it.
func (d *Digest) encode(id string) ([]byte, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode the step digest of %s: %w", id, err)
	}
	return b, nil
}

// write writes job id's encoded digest b at revision rev (0: a new one) and
// returns the new revision.
func (s *Store) write(ctx context.Context, id string, b []byte, rev uint64) (uint64, error) {
	var err error
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ioTimeout)
	defer cancel()
	if rev == 0 {
		rev, err = s.KV.Create(ctx, id, b)
	} else {
		rev, err = s.KV.Update(ctx, id, b, rev)
	}
	if err != nil {
		return rev, fmt.Errorf("save the step digest of %s: %w", id, err)
	}
	return rev, nil
}

// tail folds the job's messages stored after d.Seq into d, up to the
// newest, and returns how many it folded.
func (s *Store) tail(ctx context.Context, id string, d *Digest) (int, error) {
	n := 0
	err := history.ReplayAfter(ctx, s.JS, telemetry.StepStream, []string{telemetry.StepSubject(id)}, d.Seq, false, func(m jetstream.Msg) error {
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read metadata of a step message of %s: %w", id, err)
		}
		d.fold(md.Sequence.Stream, m.Data())
		n++
		return nil
	})
	return n, err
}

// Read is job j's digest, up to date: the saved one with the records
// stored since folded in. A digest that took many of them is saved back
// when the job has ended (nobody follows it).
func (s *Store) Read(ctx context.Context, j api.Job) (Digest, error) {
	d, rev, err := s.load(ctx, j)
	if err != nil {
		return Digest{}, err
	}
	n, err := s.tail(ctx, j.ID, &d)
	if err != nil {
		return Digest{}, fmt.Errorf("read the step records of %s: %w", j.ID, err)
	}
	if n >= writeBackAfter && j.State.Done() {
		if _, err := s.save(ctx, j.ID, &d, rev); err != nil && !history.KVConflict(err) {
			s.Log.Warn("save a step digest", zap.String("job", j.ID), zap.Error(err))
		}
	}
	return d, nil
}

// Current is job j's digest for the API (Read).
func (s *Store) Current(ctx context.Context, j api.Job) (api.StepDigest, error) {
	d, err := s.Read(ctx, j)
	if err != nil {
		return api.StepDigest{}, err
	}
	b, err := json.Marshal(d.Agg)
	if err != nil {
		return api.StepDigest{}, fmt.Errorf("encode the step digest of %s: %w", j.ID, err)
	}
	return api.StepDigest{Job: j.ID, Seq: d.Seq, Aggregate: b}, nil
}

// Start is where a replay of job j's last n records starts (Digest.Start),
// by its digest brought up to date.
func (s *Store) Start(ctx context.Context, j api.Job, n int64) (after uint64, skip int64, err error) {
	d, err := s.Read(ctx, j)
	if err != nil {
		return 0, 0, err
	}
	after, skip = d.Start(n)
	return after, skip, nil
}

// Delete removes job id's digest.
func (s *Store) Delete(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, ioTimeout)
	defer cancel()
	if err := s.KV.Purge(ctx, id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("remove the step digest of %s: %w", id, err)
	}
	return nil
}

// Follow keeps job j's digest while the job runs, and saves it every
// SaveEvery, until stop is called (or ctx ends): then it folds what is left
// and saves. stop waits for that.
//
// The digest takes the job's messages from the reader that takes them
// anyway (the job's runner, from telemetry.StoredStepSubject): stored
// hands it each message's records, decoded, with where the stream stored
// it. Reading the stream again for the digest decoded every record a
// second time and cost the daemon a twelfth of its CPU per step record
// (issue 25). A message that does not follow the last one folded (missed,
// or stored before Follow: a restarted daemon's job) leaves the digest to
// catch up with the stream, which it does at the next save; so does a
// message that comes while it does. Whatever stored is given, the digest
// folds each message of the stream once, in the stream's order.
func (s *Store) Follow(ctx context.Context, j api.Job) (stored func(seq, last uint64, recs []telemetry.StepRecord, bad int), stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	f := &follower{s: s, j: j}
	done := make(chan struct{})
	go func() { // owned by stop: it cancels and joins
		defer close(done)
		f.run(ctx)
	}()
	var once sync.Once
	return f.stored, func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
}

// follower is one running job's digest (Follow).
type follower struct {
	s *Store
	j api.Job

	mu     sync.Mutex
	d      Digest
	loaded bool // d is the saved digest (or a new one), folded on since
	// behind says a message was not folded in its turn: the next save
	// catches up with the stream first. catching says that is under way
	// (stored leaves its message to it rather than wait).
	behind, catching atomic.Bool
}

// stored folds the job's message stored at seq after its message at last
// (recs: its records; bad: its lines that did not decode), when it is the
// next one; otherwise it leaves it to the catch-up.
func (f *follower) stored(seq, last uint64, recs []telemetry.StepRecord, bad int) {
	if f.catching.Load() {
		f.behind.Store(true)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case !f.loaded:
		f.behind.Store(true)
	case seq <= f.d.Seq: // a catch-up read it
	case last == f.d.Seq:
		f.d.add(seq, recs, bad)
	default:
		f.behind.Store(true)
	}
}

// run is Follow's goroutine.
func (f *follower) run(ctx context.Context) {
	s, j := f.s, f.j
	log := s.Log.With(zap.String("job", j.ID))
	d, rev, err := s.load(ctx, j)
	if err != nil {
		log.Warn("follow the step records", zap.Error(err))
		return
	}
	f.mu.Lock()
	f.d, f.loaded = d, true
	f.mu.Unlock()
	f.behind.Store(true) // the stream may hold messages stored since the save
	every := s.SaveEvery
	if every <= 0 {
		every = DefaultSaveEvery
	}
	saved, failing := d.Seq, ""
	// save catches up with the stream when behind, and saves; a failure
	// that lasts is logged once.
	save := func(c context.Context) {
		err := f.catchUp(c)
		var b []byte
		var seq uint64
		if err == nil {
			f.mu.Lock()
			b, err = f.d.encode(j.ID)
			seq = f.d.Seq
			f.mu.Unlock()
		}
		if err == nil && seq != saved {
			var r uint64
			r, err = s.write(c, j.ID, b, rev)
			if history.KVConflict(err) { // a reader saved it meanwhile
				var theirs Digest
				if theirs, r, err = s.load(c, j); err == nil && theirs.Seq < seq {
					r, err = s.write(c, j.ID, b, r)
				}
			}
			if err == nil {
				rev, saved = r, seq
			}
		}
		switch msg := fmt.Sprint(err); {
		case err != nil && c.Err() != nil:
		case err != nil && msg != failing:
			log.Warn("bring the step digest up to date", zap.Error(err))
			failing = msg
		case err == nil:
			failing = ""
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			save(ctx)
		case <-ctx.Done():
			// The job has ended (or the daemon stops): what is left, then save.
			end, cancel := context.WithTimeout(context.WithoutCancel(ctx), ioTimeout)
			defer cancel()
			f.behind.Store(true) // its last messages may still be on their way
			save(end)
			return
		}
	}
}

// catchUp folds what the stream stored after the digest, when a message
// was not folded in its turn.
func (f *follower) catchUp(ctx context.Context) error {
	if !f.behind.Load() {
		return nil
	}
	f.catching.Store(true)
	defer f.catching.Store(false)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.behind.Store(false) // what comes while it reads is left for the next one
	if _, err := f.s.tail(ctx, f.j.ID, &f.d); err != nil {
		f.behind.Store(true)
		return err
	}
	return nil
}
