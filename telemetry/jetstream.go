package telemetry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
}

// DefaultRetention keeps a week of history, at most 1 GiB of steps and 256
// MiB of output, and a day of node samples (at most 256 MiB).
var DefaultRetention = Retention{
	StepMaxAge:   7 * 24 * time.Hour,
	StepMaxBytes: 1 << 30,
	LogMaxAge:    7 * 24 * time.Hour,
	LogMaxBytes:  256 << 20,
	NodeMaxAge:   24 * time.Hour,
	NodeMaxBytes: 256 << 20,
}

func (r Retention) withDefaults() Retention {
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
	return d
}

// Store is Scavenger's JetStream state: the job and allocation buckets and the streams.
type Store struct {
	JS          jetstream.JetStream
	Jobs        jetstream.KeyValue
	Allocations jetstream.KeyValue
}

// OpenStore creates or updates the streams and the job bucket, so that a
// daemon can start against a fresh server or one that already holds history.
func OpenStore(ctx context.Context, js jetstream.JetStream, ret Retention) (*Store, error) {
	ret = ret.withDefaults()
	streams := []jetstream.StreamConfig{
		{Name: StepStream, Description: "Scavenger step records", Subjects: []string{AllSteps},
			MaxAge: ret.StepMaxAge, MaxBytes: ret.StepMaxBytes, Discard: jetstream.DiscardOld, Storage: jetstream.FileStorage},
		{Name: OutputStream, Description: "Scavenger worker output and job events", Subjects: []string{AllLogs, AllEvents},
			MaxAge: ret.LogMaxAge, MaxBytes: ret.LogMaxBytes, Discard: jetstream.DiscardOld, Storage: jetstream.FileStorage},
		{Name: NodeStream, Description: "Scavenger node samples (GPU, host)", Subjects: []string{AllNodeGPU, AllNodeHost},
			MaxAge: ret.NodeMaxAge, MaxBytes: ret.NodeMaxBytes, Discard: jetstream.DiscardOld, Storage: jetstream.FileStorage},
	}
	for _, cfg := range streams {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
	}
	st := &Store{JS: js}
	for _, b := range []struct {
		kv   *jetstream.KeyValue
		name string
		desc string
		ttl  time.Duration
	}{
		{&st.Jobs, JobBucket, "Scavenger job records", 0},
		{&st.Allocations, AllocationBucket, "Scheduler allocations seen by prolog/epilog hooks", ret.LogMaxAge},
	} {
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: b.name, Description: b.desc, History: 1, TTL: b.ttl, Storage: jetstream.FileStorage,
		})
		if err != nil {
			return nil, fmt.Errorf("create key-value bucket %s: %w", b.name, err)
		}
		*b.kv = kv
	}
	return st, nil
}

// KVConflict reports that a key-value write lost a compare-and-set race: a
// Create found the key, or an Update was not at the revision it named.
func KVConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}
