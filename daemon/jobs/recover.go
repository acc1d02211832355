package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// What a daemon restart does to the jobs of this node
//
// A running job's workers are this daemon's children and their output pipes
// end in it, so they cannot outlive it usefully: a worker that writes to a
// pipe nobody reads dies of EPIPE. A daemon that stops (SIGTERM, systemctl
// stop or restart) therefore stops its jobs the way a move does: each is
// asked to checkpoint within its grace and ends "stopped" with a resume
// point. With Config.ResumeJobs the daemon also keeps, in
// <state>/restart/<job>.json (mode 0600), the one thing the job record does
// not hold, the workers' environment, and the next daemon on the same state
// directory resumes those jobs from their checkpoints: a restart costs the
// jobs the time it takes, not their progress.
//
// A daemon that dies without stopping its jobs (SIGKILL, a crash, the
// watchdog) leaves records that say "running". The next daemon reattaches
// to those whose launcher can (a batch scheduler's jobs outlive it; see
// adopt.go). It marks the others failed ("lost"), after asking what is left
// of their workers to checkpoint and exit (leftovers.go) and killing the
// rest, and with ResumeJobs resumes them from their last
// checkpoint (unless the leftovers could not be killed: then it says so
// instead of starting a second copy).

// Recover settles what a previous daemon on this node left. It is one
// sequence of steps, in the order they run; each calls down into the
// registry's helpers, none back into the sequence:
//
//  1. list: the records of this node's unfinished jobs (the job index
//     names them: the records of the jobs that ended are not read) and of
//     the jobs whose environment was kept, and the kept environments;
//  2. classify: attempts the launcher can reattach to, lost jobs (their
//     record says running and nothing can reattach to them), and jobs that
//     ended (stopped at the last shutdown, or done);
//  3. reattach: a runner follows each reattachable attempt from where it is;
//  4. settle the lost: their leftover workers are asked to checkpoint and
//     the rest killed; each is recorded failed ("lost"), with its cost;
//  5. drain spools: the step records the lost jobs' workers spooled while no
//     daemon took them are published;
//  6. resume: with ResumeJobs, the stopped and lost jobs resume from their
//     checkpoints; the end of each lost job that does not is published.
func (g *Registry) Recover(ctx context.Context) {
	rc := &recovery{g: g}
	if err := rc.list(ctx); err != nil {
		g.log.Warn("recover jobs", zap.Error(err))
		return
	}
	rc.classify()
	rc.reattach(ctx)
	rc.settleLost(ctx)
	rc.drainSpools(ctx)
	rc.resume(ctx)
}

// recovery is what Recover knows as its steps go.
type recovery struct {
	g    *Registry
	recs []record
	envs map[string][]string // the kept environments, by job

	reattachable []recovered
	lost         []recovered
	ended        []recovered
}

// recovered is one job's record as a recovery step found it, with what the
// steps learn of it.
type recovered struct {
	rec  record
	env  []string
	kept bool // its environment was kept: it may resume
	// note says what its leftover workers did when asked to checkpoint;
	// alive, that they may still run (they could not be killed); final,
	// the end of its last attempt, published unless it resumes.
	note  string
	alive bool
	final *telemetry.Event
}

// list reads the records of this node's jobs that the job index says have
// not ended, and of those whose environment was kept (stopped at the last
// shutdown, to be resumed), and the kept environments: the jobs that ended
// are not read. A summary that lags its record (the daemon died between
// the two writes) is written again.
func (rc *recovery) list(ctx context.Context) error {
	g := rc.g
	rc.envs = g.keptEnvs()
	ids := map[string]bool{}
	var order []string
	for _, s := range g.o.Index.Unfinished(g.o.Node) {
		ids[s.ID] = true
		order = append(order, s.ID)
	}
	var kept []string
	for id := range rc.envs {
		if !ids[id] {
			kept = append(kept, id)
		}
	}
	sort.Strings(kept)
	for _, id := range append(order, kept...) {
		r, err := g.load(ctx, id)
		switch {
		case errors.Is(err, api.ErrNoJob):
			continue // its environment is forgotten by classify
		case err != nil:
			return err
		case r.job.Node != g.o.Node:
			continue
		}
		if ids[id] && r.job.State.Done() {
			if err := g.o.Index.Put(ctx, r.job.Summary()); err != nil {
				g.log.Warn("repair a job's summary", zap.String("job", id), zap.Error(err))
			}
		}
		rc.recs = append(rc.recs, r)
	}
	return nil
}

// classify sorts the records into reattachable, lost and ended, and forgets
// the kept environments of jobs that have no record any more.
func (rc *recovery) classify() {
	for _, r := range rc.recs {
		j := r.job
		env, kept := rc.envs[j.ID]
		delete(rc.envs, j.ID)
		one := recovered{rec: r, env: env, kept: kept}
		switch {
		case !j.State.Done() && rc.g.canReattach(j):
			rc.reattachable = append(rc.reattachable, one)
		case !j.State.Done():
			rc.lost = append(rc.lost, one)
		default:
			rc.ended = append(rc.ended, one)
		}
	}
	for id := range rc.envs { // records gone
		rc.g.forgetEnv(id)
	}
}

// reattach starts a runner on each reattachable attempt.
func (rc *recovery) reattach(ctx context.Context) {
	for _, one := range rc.reattachable {
		j := one.rec.job
		from := resumePoint{attempt: j.Attempt, reattach: true}
		if err := rc.g.launch(ctx, one.rec, one.env, from, fmt.Sprintf("reattaching to attempt %d after a restart of scavd", j.Attempt)); err != nil {
			rc.g.log.Warn("reattach after restart", zap.String("job", j.ID), zap.Error(err))
		}
	}
}

// settleLost asks the lost jobs' leftover workers to checkpoint (all jobs
// at once), kills the rest and records each job's end.
func (rc *recovery) settleLost(ctx context.Context) {
	lost := make([]api.Job, len(rc.lost))
	for i, one := range rc.lost {
		lost[i] = one.rec.job
	}
	notes := rc.g.checkpointLeftovers(ctx, lost)
	for i := range rc.lost {
		one := &rc.lost[i]
		one.note = notes[one.rec.job.ID]
		one.alive, one.final = rc.g.settleLost(ctx, one.rec, one.kept && rc.g.o.ResumeJobs, one.note)
	}
}

// drainSpools publishes what the lost jobs' workers spooled; the files of
// workers that may still run are left to them.
func (rc *recovery) drainSpools(ctx context.Context) {
	for _, one := range rc.lost {
		rc.g.drainSpool(ctx, one.rec.job, !one.alive)
	}
}

// resume resumes, with ResumeJobs, the jobs stopped at the last shutdown
// and the lost ones none of whose workers may still run.
func (rc *recovery) resume(ctx context.Context) {
	for _, one := range rc.ended {
		rc.g.resumeAfterRestart(ctx, one.rec.job, one.env, one.kept, nil)
	}
	for _, one := range rc.lost {
		rc.g.resumeAfterRestart(ctx, one.rec.job, one.env, one.kept && !one.alive, one.final)
	}
}

// resumeAfterRestart resumes, with ResumeJobs, a job the daemon before
// stopped or lost (kept: its environment is kept and no worker of it may
// still run). final is the end of a lost job, published unless it resumes
// (a follower, scavctl run, goes on with the next attempt).
func (g *Registry) resumeAfterRestart(ctx context.Context, j api.Job, env []string, kept bool, final *telemetry.Event) {
	publishFinal := func() {
		if final == nil {
			return
		}
		b, _ := json.Marshal(final)
		if err := g.o.NC.Publish(telemetry.EventSubject(j.ID), b); err != nil {
			g.log.Warn("publish event", zap.String("job", j.ID), zap.Error(err))
		}
	}
	if !kept || !g.o.ResumeJobs || j.State == api.StateSucceeded {
		g.forgetEnv(j.ID)
		publishFinal()
		return
	}
	if _, err := g.Resume(ctx, j.ID, env); err != nil {
		g.forgetEnv(j.ID)
		g.log.Warn("job not resumed after restart", zap.String("job", j.ID), zap.Error(err))
		if final != nil {
			final.Message += "; it could not be resumed (" + err.Error() + "): continue it with scavctl run --resume " + j.ID
		}
		publishFinal()
		return
	}
	g.log.Info("job resumed after restart", zap.String("job", j.ID))
}

// settleLost records that a job's supervision ended with the daemon before,
// after killing what is left of its workers; alive reports that they may
// still run (they could not be killed). final is the end of its attempt, for
// the caller to publish unless the job resumes (resuming: it is to). note,
// when set, says what its workers did when asked to checkpoint (leftovers.go).
func (g *Registry) settleLost(ctx context.Context, rec record, resuming bool, note string) (alive bool, final *telemetry.Event) {
	j := &rec.job
	msg := "lost: the scavd that ran it exited without stopping it (killed, crashed or timed out by the watchdog)"
	if note != "" {
		msg += "; " + note
	}
	switch n, err := g.stopLeftovers(ctx, *j); {
	case err != nil:
		alive = true
		msg += fmt.Sprintf("; its workers may still run, unsupervised (%v): stop them, then scavctl run --resume %s", err, j.ID)
	case n > 0:
		msg += fmt.Sprintf("; its %d leftover worker processes were killed", n)
	}
	switch {
	case !alive && resuming:
		msg += "; resuming it from its last checkpoint"
	case !alive:
		msg += "; continue it with scavctl run --resume " + j.ID
	}
	now := time.Now().UTC()
	code := -1
	j.State, j.Ended, j.ExitCode, j.Message = api.StateFailed, &now, &code, msg
	if k := len(j.Attempts); k > 0 && j.Attempts[k-1].Ended == nil {
		j.Attempts[k-1].Ended, j.Attempts[k-1].EndReason = &now, "lost"
	}
	if b, ok := g.o.Launcher.(plugins.Biller); ok {
		chargeJob(ctx, b, j, true, g.log)
	}
	if _, err := rec.commit(ctx); err != nil {
		g.log.Error("record a lost job", zap.String("job", j.ID), zap.Error(err))
	}
	g.log.Warn("job lost by the previous daemon", zap.String("job", j.ID), zap.String("message", msg))
	if resuming && !alive {
		b, _ := json.Marshal(telemetry.Event{Kind: telemetry.EventRestarting, Job: j.ID, Attempt: j.Attempt, Message: msg, Time: now})
		if err := g.o.NC.Publish(telemetry.EventSubject(j.ID), b); err != nil {
			g.log.Warn("publish event", zap.String("job", j.ID), zap.Error(err))
		}
	}
	return alive, &telemetry.Event{Kind: telemetry.EventFinished, Job: j.ID, Attempt: j.Attempt, ExitCode: &code, Message: msg, Time: now}
}
