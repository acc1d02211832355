package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// ErrConflict is returned when a job record changed in the bucket since its
// writer last read or wrote it: the write is refused, never made over it.
var ErrConflict = errors.New("job record changed under its writer")

// saveTimeout bounds one write of a job record.
const saveTimeout = 5 * time.Second

// record is a job's record as its one writer holds it: the job and the
// bucket revision it was last read or written at (0: not in the bucket yet),
// and the job index its summary goes to.
type record struct {
	kv  jetstream.KeyValue
	idx Index
	job api.Job
	rev uint64
}

// commit writes the record to the bucket, then its summary to the job
// index. It is the one function that writes job records: it creates the
// key when the record is new and otherwise updates it only at the revision
// it last saw, so that a write never carries an older snapshot over a newer
// one. A conflict is ErrConflict; the record keeps its revision, so later
// commits fail too until someone looks. The summary follows the record
// (jobindex.Index.Put): the index never says more than a record does.
func (r *record) commit(ctx context.Context) ([]byte, error) {
	b, err := json.Marshal(r.job)
	if err != nil {
		return nil, fmt.Errorf("encode job %s: %w", r.job.ID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, saveTimeout)
	defer cancel()
	var rev uint64
	if r.rev == 0 {
		rev, err = r.kv.Create(ctx, r.job.ID, b)
	} else {
		rev, err = r.kv.Update(ctx, r.job.ID, b, r.rev)
	}
	switch {
	case history.KVConflict(err):
		return b, fmt.Errorf("save job %s at revision %d: %w", r.job.ID, r.rev, ErrConflict)
	case err != nil:
		return b, fmt.Errorf("save job %s: %w", r.job.ID, err)
	}
	r.rev = rev
	if r.idx != nil {
		if err := r.idx.Put(ctx, r.job.Summary()); err != nil {
			return b, err
		}
	}
	return b, nil
}

// load reads one job record with its revision.
func (g *Registry) load(ctx context.Context, id string) (record, error) {
	r, err := load(ctx, g.o.KV, id)
	r.idx = g.o.Index
	return r, err
}

// load reads one job record with its revision from kv.
func load(ctx context.Context, kv jetstream.KeyValue, id string) (record, error) {
	if !telemetry.ValidJobID(id) {
		return record{}, fmt.Errorf("%w: %q is not a job id", api.ErrBadRequest, id)
	}
	ctx, cancel := context.WithTimeout(ctx, saveTimeout)
	defer cancel()
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return record{}, fmt.Errorf("job %s: %w", id, api.ErrNoJob)
	}
	if err != nil {
		return record{}, fmt.Errorf("read job %s: %w", id, err)
	}
	r := record{kv: kv, rev: e.Revision()}
	if err := json.Unmarshal(e.Value(), &r.job); err != nil {
		return record{}, fmt.Errorf("decode job %s: %w", id, err)
	}
	return r, nil
}
