package jobs

import (
	"context"
	"time"

	"github.com/scavenger-ml/scavenger/api"
)

// LiveAttempt is what the telemetry socket may take of a running attempt:
// its workers, the step it went on from, and when it started (the bounds
// of what its records may say: daemon/ingest's Attempt).
type LiveAttempt struct {
	Attempt   int
	Workers   int
	StartStep int64
	Started   time.Time
}

// liveTimeout bounds the read of a job's record for an attempt that runs
// on another node.
const liveTimeout = 2 * time.Second

// Live says whether job's attempt runs now, and what its records may say:
// an attempt of a job running here from the moment its workers get their
// token to the moment they are gone; one of a job that another node runs,
// or that this daemon has not reattached to yet (a restart), while its
// record says it runs. A finished attempt's token binds nothing more.
func (g *Registry) Live(ctx context.Context, job string, attempt int) (LiveAttempt, bool) {
	if r := g.running(job); r != nil {
		if a := r.live.Load(); a != nil {
			return *a, a.Attempt == attempt
		}
		return LiveAttempt{}, false // between two attempts
	}
	ctx, cancel := context.WithTimeout(ctx, liveTimeout)
	defer cancel()
	rec, err := load(ctx, g.o.KV, job)
	if err != nil {
		return LiveAttempt{}, false
	}
	return recordedLive(rec.job, attempt)
}

// recordedLive is the attempt of j its record says runs, when it is attempt.
func recordedLive(j api.Job, attempt int) (LiveAttempt, bool) {
	k := len(j.Attempts)
	if j.State != api.StateRunning || k == 0 || j.Attempt != attempt {
		return LiveAttempt{}, false
	}
	a := j.Attempts[k-1]
	if a.Attempt != attempt || a.Ended != nil {
		return LiveAttempt{}, false
	}
	// The step it went on from is not recorded: the newest any attempt
	// reached bounds it from above, which only widens what is taken.
	var start int64
	for _, b := range j.Attempts {
		start = max(start, b.LastStep)
	}
	return LiveAttempt{Attempt: attempt, Workers: a.Config.Workers, StartStep: start, Started: a.Started}, true
}

// openLive makes the attempt p names live for the telemetry socket, before
// its workers get their token (a reattached one from when it started).
func (r *runner) openLive(p *plan) {
	a := LiveAttempt{Attempt: p.attempt, Workers: p.cfg.Workers, StartStep: p.step, Started: time.Now()}
	if k := len(r.rec.job.Attempts); p.reattach && k > 0 && r.rec.job.Attempts[k-1].Attempt == p.attempt {
		prev := r.rec.job.Attempts[k-1]
		a.Started = prev.Started
		if prev.FirstStep > 0 {
			a.StartStep = prev.FirstStep - 1
		}
	}
	r.live.Store(&a)
}
