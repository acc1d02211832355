package daemon

import (
	"context"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/daemon/ingest"
	"github.com/scavenger-ml/scavenger/daemon/jobs"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// liveAttempts tells the telemetry socket which attempts run (the
// registry's Live), once the registry is made: until then a hello binds
// nothing, and the worker tries again.
func liveAttempts(registry *atomic.Pointer[jobs.Registry]) ingest.Attempts {
	return func(ctx context.Context, job string, attempt int) (ingest.Attempt, bool) {
		g := registry.Load()
		if g == nil {
			return ingest.Attempt{}, false
		}
		a, ok := g.Live(ctx, job, attempt)
		return ingest.Attempt{Workers: a.Workers, StartStep: a.StartStep, Started: a.Started}, ok
	}
}

// lastStoredSteps reads, for the telemetry socket's marks (ingest.Stored), the
// steps of the records of job's attempt stored in the ingest.StoredSpan
// before its newest step message.
func lastStoredSteps(js jetstream.JetStream) ingest.Stored {
	return func(ctx context.Context, job string, attempt int) (map[int][]int64, error) {
		last, err := history.LastStepMsg(ctx, js, job)
		if err != nil || last == nil {
			return nil, err
		}
		out := map[int][]int64{}
		err = history.ReplaySince(ctx, js, telemetry.StepStream, []string{telemetry.StepSubject(job)}, last.Time.Add(-ingest.StoredSpan), func(m jetstream.Msg) error {
			recs, _ := telemetry.DecodeBatch(m.Data())
			for _, r := range recs {
				if r.Attempt == attempt && r.IsStep() {
					out[r.Rank] = append(out[r.Rank], r.Step)
				}
			}
			return nil
		})
		return out, err
	}
}
