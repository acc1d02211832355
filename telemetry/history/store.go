package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// Retention bounds the history the daemon keeps. Zero fields take the defaults.
type Retention struct {
	// StepMaxAge and StepMaxBytes bound the step stream.
	StepMaxAge   time.Duration
	StepMaxBytes int64
	// LogMaxAge and LogMaxBytes bound the worker-output stream.
	LogMaxAge   time.Duration
	LogMaxBytes int64
	// NodeMaxAge and NodeMaxBytes bound the node-sample stream.
	NodeMaxAge   time.Duration
	NodeMaxBytes int64
	// JournalMaxBytes bounds the job records' journal (journal.go).
	JournalMaxBytes int64
	// Replicas is how many servers of a NATS cluster hold each stream and
	// bucket (0 or 1: one; 3 keeps them through the loss of any one server).
	Replicas int
}

// DefaultRetention keeps a week of history, at most 1 GiB of steps and 256
// MiB of output, a day of node samples (at most 256 MiB), and 64 MiB of the
// job records' journal.
var DefaultRetention = Retention{
	StepMaxAge:      7 * 24 * time.Hour,
	StepMaxBytes:    1 << 30,
	LogMaxAge:       7 * 24 * time.Hour,
	LogMaxBytes:     256 << 20,
	NodeMaxAge:      24 * time.Hour,
	NodeMaxBytes:    256 << 20,
	JournalMaxBytes: 64 << 20,
}

// WithDefaults is r with its zero fields set to DefaultRetention's.
func (r Retention) WithDefaults() Retention {
	d := DefaultRetention
	if r.StepMaxAge > 0 {
		d.StepMaxAge = r.StepMaxAge
	}
	if r.StepMaxBytes > 0 {
		d.StepMaxBytes = r.StepMaxBytes
	}
	if r.LogMaxAge > 0 {
		d.LogMaxAge = r.LogMaxAge
	}
	if r.LogMaxBytes > 0 {
		d.LogMaxBytes = r.LogMaxBytes
	}
	if r.NodeMaxAge > 0 {
		d.NodeMaxAge = r.NodeMaxAge
	}
	if r.NodeMaxBytes > 0 {
		d.NodeMaxBytes = r.NodeMaxBytes
	}
	if r.JournalMaxBytes > 0 {
		d.JournalMaxBytes = r.JournalMaxBytes
	}
	d.Replicas = r.Replicas
	return d
}

// StepDuplicates is the step stream's duplicate window: a message sent
// again with the same Nats-Msg-Id within it is stored once. It must outlast
// the longest a daemon tries a message again (ingest.StreamPublisher: its
// patience and one try's timeout); a worker's own copies after a stall are
// told apart by their session (daemon/ingest/dedupe.go).
const StepDuplicates = 2 * time.Minute

// OutputKeepPerSubject bounds each subject of the output stream: a job's
// output head, its tail (the newest lines past the head) and its events.
const OutputKeepPerSubject = 4000

// Store is Scavenger's JetStream state: the job, job index, step digest
// and allocation buckets and the streams.
type Store struct {
	JS jetstream.JetStream
	// Jobs is the job bucket, journaled (journal.go): write and delete job
	// records through it.
	Jobs        jetstream.KeyValue
	JobIndex    jetstream.KeyValue
	StepDigests jetstream.KeyValue
	Allocations jetstream.KeyValue
	Models      jetstream.KeyValue
}

// OpenStore creates or updates the streams and the buckets, so that a
// daemon can start against a fresh server or one that already holds history.
func OpenStore(ctx context.Context, js jetstream.JetStream, ret Retention) (*Store, error) {
	ret = ret.WithDefaults()
	streams := []jetstream.StreamConfig{
		{Name: telemetry.StepStream, Description: "Scavenger step records", Subjects: []string{telemetry.AllSteps},
			MaxAge: ret.StepMaxAge, MaxBytes: ret.StepMaxBytes, Discard: jetstream.DiscardOld, Storage: jetstream.FileStorage, Replicas: ret.Replicas,
			Duplicates: StepDuplicates, RePublish: &jetstream.RePublish{Source: telemetry.AllSteps, Destination: telemetry.AllStoredSteps}},
		{Name: telemetry.OutputStream, Description: "Scavenger worker output and job events", Subjects: []string{telemetry.AllLogs, telemetry.AllTails, telemetry.AllEvents},
			MaxAge: ret.LogMaxAge, MaxBytes: ret.LogMaxBytes, MaxMsgsPerSubject: OutputKeepPerSubject,
			Discard: jetstream.DiscardOld, Storage: jetstream.FileStorage, Replicas: ret.Replicas},
		{Name: telemetry.NodeStream, Description: "Scavenger node samples (GPU, host)", Subjects: []string{telemetry.AllNodeGPU, telemetry.AllNodeHost},
			MaxAge: ret.NodeMaxAge, MaxBytes: ret.NodeMaxBytes, Discard: jetstream.DiscardOld, Storage: jetstream.FileStorage, Replicas: ret.Replicas},
		{Name: telemetry.JournalStream, Description: "Scavenger job records' journal (the newest of each)", Subjects: []string{telemetry.AllRecords},
			MaxBytes: ret.JournalMaxBytes, MaxMsgsPerSubject: 1, Discard: jetstream.DiscardOld, Storage: jetstream.FileStorage, Replicas: ret.Replicas},
	}
	// Made at once, not one after the other: in a cluster each new
	// replicated stream waits seconds for its first leader.
	st := &Store{JS: js}
	buckets := []struct {
		kv  *jetstream.KeyValue
		cfg jetstream.KeyValueConfig
	}{
		{&st.Jobs, jetstream.KeyValueConfig{Bucket: telemetry.JobBucket, Description: "Scavenger job records"}},
		{&st.JobIndex, jetstream.KeyValueConfig{Bucket: telemetry.JobIndexBucket, Description: "Scavenger job index: a summary of each job"}},
		{&st.StepDigests, jetstream.KeyValueConfig{Bucket: telemetry.StepDigestBucket, Description: "Scavenger step digests: what each job's step records add up to"}},
		{&st.Allocations, jetstream.KeyValueConfig{Bucket: telemetry.AllocationBucket, Description: "Scheduler allocations seen by prolog/epilog hooks", TTL: ret.LogMaxAge}},
		{&st.Models, jetstream.KeyValueConfig{Bucket: telemetry.ModelBucket, Description: "Scavenger model store: measured step times, noise and relaunches per owner, job signature and machine type"}},
	}
	var wg sync.WaitGroup
	errs := make([]error, len(streams)+len(buckets))
	for i, cfg := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
				errs[i] = fmt.Errorf("create stream %s: %w", cfg.Name, err)
			}
		}()
	}
	for i, b := range buckets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := b.cfg
			cfg.History, cfg.Storage, cfg.Replicas = 1, jetstream.FileStorage, ret.Replicas
			kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
			if err != nil {
				errs[len(streams)+i] = fmt.Errorf("create key-value bucket %s: %w", cfg.Bucket, err)
				return
			}
			*b.kv = kv
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	st.Jobs = journaled{KeyValue: st.Jobs, js: js}
	return st, nil
}

// KVConflict reports that a key-value write lost a compare-and-set race: a
// Create found the key, or an Update was not at the revision it named.
func KVConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}
