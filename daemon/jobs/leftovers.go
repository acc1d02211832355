package jobs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// The workers of a job whose daemon died still run (a local launcher's
// children cannot be reattached to: their output pipes ended in the dead
// daemon), and their clients reconnect to the new daemon's socket within
// a couple of seconds. Before it kills what is left of them, the new daemon
// asks them, as a move does, to checkpoint and exit: the job then resumes
// from where they were, not from an older checkpoint, and each client
// delivers its last step records (and has them confirmed) before it exits.
// The request names a step a little past the furthest any rank has reached
// (as a move's does: moveLeadSteps, or moveLeadTime at the step time) so
// that ranks that drifted apart stop at the same step: a rank already past
// it would stop where it is, and the checkpoint would claim steps the
// others never did. Where the ranks are is what their hellos and records
// since say, once all have connected (or leftoverGather after the first),
// and at least what the store's newest record, aged, says. A job with no
// worker connected within leftoverConnect (an uninstrumented script,
// workers already gone) is killed at once, as before.
const (
	leftoverConnect = 3 * time.Second // the python client reconnects within 2 s (BACKOFF_MAX)
	leftoverGather  = 2500 * time.Millisecond
	leftoverGrace   = 15 * time.Second
	leftoverClose   = 2 * time.Second // for the clients to deliver their last records and close
	leftoverPoll    = 100 * time.Millisecond
)

// checkpointLeftovers asks the leftover workers of each job to checkpoint
// and exit (see above), all jobs at once, and waits for them within the
// bounds above. It returns, by job, what became of them, for the record.
func (g *Registry) checkpointLeftovers(ctx context.Context, jobs []api.Job) map[string]string {
	if g.o.Progress == nil || len(jobs) == 0 {
		return nil
	}
	var (
		mu  sync.Mutex
		out = map[string]string{}
		wg  sync.WaitGroup
	)
	for _, j := range jobs {
		wg.Go(func() {
			if note := g.checkpointLeftover(ctx, j); note != "" {
				mu.Lock()
				out[j.ID] = note
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// checkpointLeftover does it for one job; the note says what its workers did.
func (g *Registry) checkpointLeftover(ctx context.Context, j api.Job) string {
	a, ok := openAttempt(j, g.o.Launcher.Name())
	if !ok || a.Ended != nil {
		return ""
	}
	id := fmt.Sprintf("%s-%d-recover", j.ID, a.Attempt)
	acks, sub, err := g.followAcks(j.ID, a.Attempt)
	if err != nil {
		g.log.Warn("ask a lost job's workers to checkpoint", zap.String("job", j.ID), zap.Error(err))
		return ""
	}
	defer func() { _ = sub.Unsubscribe() }()
	var req []byte
	var first time.Time // when a worker first connected
	start := time.Now()
	tick := time.NewTicker(leftoverPoll)
	defer tick.Stop()
	workers := max(1, a.Config.Workers)
	acked, step := map[int]bool{}, int64(0)
	for len(acked) < workers && time.Since(start) < leftoverGrace {
		conns, reached := g.o.Progress(j.ID)
		if conns > 0 && first.IsZero() {
			first = time.Now()
		}
		if req == nil && conns > 0 && (conns >= workers || time.Since(first) >= leftoverGather) {
			req = telemetry.Control{Kind: telemetry.ControlCheckpoint, ID: id, Job: j.ID, Attempt: a.Attempt, Dir: j.CheckpointDir,
				AfterStep: g.leftoverStep(ctx, j.ID, reached)}.Encode()
		}
		switch {
		case req != nil && conns > 0:
			// Sent again while some have not answered: a worker that
			// connects later gets it too (a request it has is replaced by
			// the same one).
			if err := g.o.NC.Publish(telemetry.ControlSubject(j.ID), req); err != nil {
				g.log.Warn("ask a lost job's workers to checkpoint", zap.String("job", j.ID), zap.Error(err))
				return ""
			}
		case first.IsZero() && time.Since(start) > leftoverConnect:
			return ""
		}
		select {
		case r := <-acks:
			if r.ID != id {
				continue
			}
			acked[r.Rank] = true
			if r.Checkpoint != "" {
				step = r.Step
			}
		case <-tick.C:
		case <-ctx.Done():
			return ""
		}
	}
	if len(acked) == 0 {
		return ""
	}
	for end := time.Now().Add(leftoverClose); g.connected(j.ID) > 0 && time.Now().Before(end); {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ""
		}
	}
	if step > 0 {
		return fmt.Sprintf("its %d running workers checkpointed step %d when asked", len(acked), step)
	}
	return fmt.Sprintf("its %d running workers stopped when asked", len(acked))
}

// connected counts the job's workers connected to the telemetry socket.
func (g *Registry) connected(job string) int {
	n, _ := g.o.Progress(job)
	return n
}

// leftoverStep is the step a lost job's workers are asked to checkpoint
// after: the furthest of reached (where its connected workers are) and its
// newest stored step record's step plus the steps its workers have done
// since that record's time at its step time (the record may be seconds
// old: they ran while no daemon stored anything), plus a lead (0: nothing
// known, which asks at once).
func (g *Registry) leftoverStep(ctx context.Context, job string, reached int64) int64 {
	var last telemetry.StepRecord
	if m, err := history.LastStepMsg(ctx, g.js, job); m != nil && err == nil {
		recs, _ := telemetry.DecodeBatch(m.Data)
		for _, r := range recs {
			if r.Step > last.Step {
				last = r
			}
		}
	}
	at := max(reached, last.Step)
	if age := float64(time.Now().UnixNano())/1e9 - last.Time; last.Step > 0 && last.Seconds > 0 && age > 0 {
		at = max(at, last.Step+int64(age/last.Seconds))
	}
	if at == 0 {
		return 0
	}
	return at + moveLead(last.Seconds)
}
