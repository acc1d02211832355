// Package aggregates keeps each job's step digest: what its step records
// add up to (a stepstats.Aggregate), as of a sequence of the step stream, in
// a key-value bucket keyed by job id. While a job runs, the daemon of its
// node brings it up to date with the stream and saves it every SaveEvery
// and when the job ends (Follow). A reader gets the saved digest with the
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
	b, err := json.Marshal(d)
	if err != nil {
		return rev, fmt.Errorf("encode the step digest of %s: %w", id, err)
	}
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

// Follow brings job j's digest up to date with the stream every SaveEvery
// and saves it, until stop is called (or ctx ends): then it folds what is
// left and saves. stop waits for that.
//
// It catches up in one read, not by following every message as it is
// stored: a delivery per step message cost the daemon a good part of its
// CPU per record (a consumer's wake-ups, for each message of each running
// job), and a reader gets the digest up to date anyway (Read folds what
// was stored after the save).
func (s *Store) Follow(ctx context.Context, j api.Job) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // owned by stop: it cancels and joins
		defer close(done)
		s.follow(ctx, j)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
}

// follow is Follow's goroutine.
func (s *Store) follow(ctx context.Context, j api.Job) {
	log := s.Log.With(zap.String("job", j.ID))
	d, rev, err := s.load(ctx, j)
	if err != nil {
		log.Warn("follow the step records", zap.Error(err))
		return
	}
	every := s.SaveEvery
	if every <= 0 {
		every = DefaultSaveEvery
	}
	saved, failing := d.Seq, ""
	// catchUp folds the messages stored since d.Seq and saves; a failure
	// that lasts is logged once.
	catchUp := func(c context.Context) {
		_, err := s.tail(c, j.ID, &d)
		if err == nil && d.Seq != saved {
			var r uint64
			r, err = s.save(c, j.ID, &d, rev)
			if history.KVConflict(err) { // a reader saved it meanwhile
				var theirs Digest
				if theirs, r, err = s.load(c, j); err == nil && theirs.Seq < d.Seq {
					r, err = s.save(c, j.ID, &d, r)
				}
			}
			if err == nil {
				rev, saved = r, d.Seq
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
			catchUp(ctx)
		case <-ctx.Done():
			// The job has ended (or the daemon stops): what is left, then save.
			end, cancel := context.WithTimeout(context.WithoutCancel(ctx), ioTimeout)
			defer cancel()
			catchUp(end)
			return
		}
	}
}
