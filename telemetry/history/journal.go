package history

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// The job records' journal. A job record lives in the job bucket, one file
// store; a few damaged bytes there, or its last write cut off, cost the
// record (or bring back an older one: a finished job seen as running). So
// every write of a record through Store.Jobs is also published, with the
// revision the bucket gave it, on the job's subject of the journal stream,
// which keeps the newest of each job in files of its own. When the daemon
// finds the bucket damaged or behind its journal, RestoreJobs puts back
// every record the journal holds newer. Deleting a record through
// Store.Jobs deletes its journal copy too.

// revisionHeader carries the bucket revision of a journaled record.
const revisionHeader = "Scav-Revision"

// journaled is the job bucket with its journal.
type journaled struct {
	jetstream.KeyValue
	js jetstream.JetStream
}

// note publishes the record of key written at rev to the journal. It is a
// second copy: a failure is not the write's, and the bucket stays the truth.
func (j journaled) note(key string, value []byte, rev uint64, err error) (uint64, error) {
	if err == nil {
		m := &nats.Msg{Subject: telemetry.RecordSubject(key), Data: value, Header: nats.Header{}}
		m.Header.Set(revisionHeader, strconv.FormatUint(rev, 10))
		_ = j.js.Conn().PublishMsg(m)
	}
	return rev, err
}

func (j journaled) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := j.KeyValue.Put(ctx, key, value)
	return j.note(key, value, rev, err)
}

func (j journaled) PutString(ctx context.Context, key, value string) (uint64, error) {
	return j.Put(ctx, key, []byte(value))
}

func (j journaled) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := j.KeyValue.Create(ctx, key, value, opts...)
	return j.note(key, value, rev, err)
}

func (j journaled) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := j.KeyValue.Update(ctx, key, value, last)
	return j.note(key, value, rev, err)
}

func (j journaled) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if err := j.KeyValue.Delete(ctx, key, opts...); err != nil {
		return err
	}
	return j.forget(ctx, key)
}

func (j journaled) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if err := j.KeyValue.Purge(ctx, key, opts...); err != nil {
		return err
	}
	return j.forget(ctx, key)
}

// forget removes key's journal copy.
func (j journaled) forget(ctx context.Context, key string) error {
	s, err := j.js.Stream(ctx, telemetry.JournalStream)
	if err == nil {
		err = s.Purge(ctx, jetstream.WithPurgeSubject(telemetry.RecordSubject(key)))
	}
	if err != nil {
		return fmt.Errorf("delete the journal copy of job %s: %w", key, err)
	}
	return nil
}

// JournalAhead reports whether the journal knows of job records the bucket
// lacks: more of them, or a write later than the bucket's last (its end
// was cut off). Two lookups, whatever the number of jobs.
func (s *Store) JournalAhead(ctx context.Context) (bool, error) {
	jr, err := s.JS.Stream(ctx, telemetry.JournalStream)
	if err != nil {
		return false, fmt.Errorf("open stream %s: %w", telemetry.JournalStream, err)
	}
	bk, err := s.JS.Stream(ctx, "KV_"+telemetry.JobBucket)
	if err != nil {
		return false, fmt.Errorf("open bucket %s: %w", telemetry.JobBucket, err)
	}
	ji, bi := jr.CachedInfo().State, bk.CachedInfo().State
	if ji.Msgs > bi.Msgs {
		return true, nil
	}
	if ji.Msgs == 0 {
		return false, nil
	}
	last, err := jr.GetMsg(ctx, ji.LastSeq)
	if err != nil {
		return false, fmt.Errorf("read the journal's last record: %w", err)
	}
	rev, _ := strconv.ParseUint(last.Header.Get(revisionHeader), 10, 64)
	return rev > bi.LastSeq, nil
}

// Restored is what RestoreJobs did.
type Restored struct {
	// Journaled counts the records the journal holds.
	Journaled int
	// Restored names the jobs whose record came back from the journal: the
	// bucket had none, or an older one.
	Restored []string
	// Failed names the jobs whose record the journal holds newer but that
	// could not be written back, with why.
	Failed map[string]error
}

// RestoreJobs writes back into the job bucket every record the journal
// holds at a later revision than the bucket (or that the bucket lacks).
func (s *Store) RestoreJobs(ctx context.Context) (Restored, error) {
	out := Restored{Failed: map[string]error{}}
	type copy struct {
		id   string
		rev  uint64
		data []byte
	}
	var copies []copy // all read before any is written back (which journals it again)
	err := ReplayLast(ctx, s.JS, telemetry.JournalStream, []string{telemetry.AllRecords}, false, func(m jetstream.Msg) error {
		rev, _ := strconv.ParseUint(m.Headers().Get(revisionHeader), 10, 64)
		copies = append(copies, copy{id: telemetry.JobOfSubject(m.Subject()), rev: rev, data: m.Data()})
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("restore job records: read the journal: %w", err)
	}
	out.Journaled = len(copies)
	for _, c := range copies {
		cur, err := s.Jobs.Get(ctx, c.id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			_, err = s.Jobs.Create(ctx, c.id, c.data)
		case err != nil:
		case cur.Revision() >= c.rev:
			continue
		default:
			_, err = s.Jobs.Update(ctx, c.id, c.data, cur.Revision())
		}
		if err != nil {
			out.Failed[c.id] = err
			if ctx.Err() != nil {
				return out, fmt.Errorf("restore job records: %w", ctx.Err())
			}
			continue
		}
		out.Restored = append(out.Restored, c.id)
	}
	return out, nil
}
