package daemon

import (
	"context"
	"sync/atomic"

	"github.com/scavenger-ml/scavenger/daemon/ingest"
	"github.com/scavenger-ml/scavenger/daemon/jobs"
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
