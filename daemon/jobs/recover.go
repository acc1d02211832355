package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
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
//  4. stop the lost: their leftover workers are asked to checkpoint and the
//     rest killed;
//  5. drain spools: the step records that the lost jobs' workers spooled
//     while no daemon took them are published, with those of the jobs an
//     earlier daemon recorded lost (workers that it could not stop may have
//     spooled since); the workers' end records are read;
//  6. settle the lost: a job whose every rank's end record says it exited
//     0 finished while no daemon watched, and is recorded succeeded (so is
//     a job recorded lost before, once its ends are found); the others are
//     recorded failed ("lost"), each with its cost;
//  7. resume: with ResumeJobs, the stopped and lost jobs resume from their
//     checkpoints; the end of each lost job that does not is published.
func (g *Registry) Recover(ctx context.Context) {
	rc := &recovery{g: g}
	if err := rc.list(ctx); err != nil {
		g.log.Warn("recover jobs", zap.Error(err))
		return
	}
	rc.classify()
	rc.reattach(ctx)
	rc.stopLost(ctx)
	rc.drainSpools(ctx)
	rc.settleLost(ctx)
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
	// note says what its leftover workers did when asked to checkpoint and
	// what was killed; alive, that they may still run (they could not be
	// killed); spool, what its workers spooled; final, the end of its last
	// attempt, published unless it resumes.
	note  string
	alive bool
	spool spooled
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
	// The jobs recorded lost before (failed, exit -1): their ends may have
	// turned up in their spools since.
	ended, _ := g.o.Index.Ended(g.o.Node)
	var kept []string
	for _, s := range ended {
		if s.State == api.StateFailed && s.ExitCode != nil && *s.ExitCode == -1 && !ids[s.ID] {
			kept = append(kept, s.ID)
		}
	}
	for id := range rc.envs {
		if !ids[id] {
			kept = append(kept, id)
		}
	}
	sort.Strings(kept)
	kept = slices.Compact(kept)
	var unreadable []string
	for _, id := range append(order, kept...) {
		r, err := g.load(ctx, id)
		switch {
		case errors.Is(err, api.ErrNoJob):
			continue // its environment is forgotten by classify
		case ctx.Err() != nil:
			return err
		case err != nil:
			unreadable = append(unreadable, id)
			continue
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
	g.unreadable.Store(&unreadable)
	if len(unreadable) > 0 {
		g.log.Error("job records that cannot be read (see scavctl status)", zap.Strings("jobs", unreadable))
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

// stopLost asks the lost jobs' leftover workers to checkpoint (all jobs at
// once) and kills the rest.
func (rc *recovery) stopLost(ctx context.Context) {
	lost := make([]api.Job, len(rc.lost))
	for i, one := range rc.lost {
		lost[i] = one.rec.job
	}
	notes := rc.g.checkpointLeftovers(ctx, lost)
	for i := range rc.lost {
		one := &rc.lost[i]
		j := one.rec.job
		one.note = notes[j.ID]
		switch n, err := rc.g.stopLeftovers(ctx, j); {
		case err != nil:
			one.alive = true
			one.note = joinNote(one.note, fmt.Sprintf("its workers may still run, unsupervised (%v): stop them, then scavctl run --resume %s", err, j.ID))
		case n > 0:
			one.note = joinNote(one.note, fmt.Sprintf("its %d leftover worker processes were killed", n))
		}
	}
}

// joinNote appends part to note, "; " between them.
func joinNote(note, part string) string {
	if note == "" {
		return part
	}
	return note + "; " + part
}

// drainSpools publishes what the lost jobs' workers spooled (the files of
// workers that may still run are left to them), and what the workers of
// jobs recorded lost by an earlier daemon spooled since.
func (rc *recovery) drainSpools(ctx context.Context) {
	for i := range rc.lost {
		one := &rc.lost[i]
		one.spool = rc.g.drainSpool(ctx, one.rec.job, !one.alive)
	}
	for i := range rc.ended {
		one := &rc.ended[i]
		if lostBefore(one.rec.job) {
			one.spool = rc.g.drainSpool(ctx, one.rec.job, false)
		}
	}
}

// lostBefore reports whether j was recorded lost (failed when the daemon
// that ran it died).
func lostBefore(j api.Job) bool {
	k := len(j.Attempts)
	return j.State == api.StateFailed && k > 0 && j.Attempts[k-1].EndReason == endLost
}

// settleLost records each lost job's end: succeeded when its spool holds
// every rank's clean end, failed ("lost") otherwise; a job recorded lost
// before whose ends have turned up since is recorded succeeded.
func (rc *recovery) settleLost(ctx context.Context) {
	for i := range rc.lost {
		one := &rc.lost[i]
		one.final = rc.g.settleLost(ctx, one, one.kept && rc.g.o.ResumeJobs)
	}
	for i := range rc.ended {
		one := &rc.ended[i]
		if lostBefore(one.rec.job) && one.spool.cleanEnd(one.rec.job.Attempt) {
			one.final = rc.g.settleLost(ctx, one, false)
		}
	}
}

// resume resumes, with ResumeJobs, the jobs stopped at the last shutdown
// and the lost ones none of whose workers may still run.
func (rc *recovery) resume(ctx context.Context) {
	for _, one := range rc.ended {
		final := one.final
		if final == nil && one.kept { // handed over by the daemon before: its followers wait for this one's word
			final = rc.g.handedOverEnd(one.rec.job)
		}
		rc.g.resumeAfterRestart(ctx, one.rec.job, one.env, one.kept, final)
	}
	for _, one := range rc.lost {
		rc.g.resumeAfterRestart(ctx, one.rec.job, one.env, one.kept && !one.alive, one.final)
	}
}

// handoverNote begins what the end of a job handed to the next daemon adds
// to its message.
const handoverNote = "; scavd is restarting"

// handedOverEnd is the end of a job that the daemon before stopped to hand
// it to this one (its end said so, and its followers wait): published when
// this daemon does not resume it.
func (g *Registry) handedOverEnd(j api.Job) *telemetry.Event {
	msg, _, _ := strings.Cut(j.Message, handoverNote)
	if !g.o.ResumeJobs {
		msg += "; the next scavd did not resume it (resume_jobs is off): continue it with scavctl run --resume " + j.ID
	}
	return &telemetry.Event{Kind: telemetry.EventFinished, Job: j.ID, Attempt: j.Attempt, ExitCode: j.ExitCode,
		State: string(j.State), Message: msg, Time: time.Now().UTC()}
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
	if _, err := g.resume(ctx, j.ID, env); err != nil {
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

// endLost is the EndReason of an attempt its daemon lost.
const endLost = "lost"

// settleLost records the end of a job whose supervision ended with the
// daemon before, after its leftover workers were stopped (one.alive: they
// may still run) and its spool drained: succeeded when every rank's end
// record says it exited 0, else failed ("lost"). It returns the end of the
// attempt, for the caller to publish unless the job resumes (resuming: it
// is to; a succeeded job never resumes).
func (g *Registry) settleLost(ctx context.Context, one *recovered, resuming bool) *telemetry.Event {
	rec := one.rec
	j := &rec.job
	again := lostBefore(*j) // settled lost before: charged then
	done := !one.alive && one.spool.cleanEnd(j.Attempt)
	state, code, reason := api.StateFailed, -1, endLost
	msg := "lost: the scavd that ran it exited without stopping it (killed, crashed or timed out by the watchdog)"
	if done {
		state, code, reason = api.StateSucceeded, 0, string(api.StateSucceeded)
		msg = fmt.Sprintf("finished while no scavd supervised it: each of its %d workers left its end (exit 0) in its spool", len(one.spool.ends))
	}
	if one.note != "" {
		msg += "; " + one.note
	}
	switch {
	case done || one.alive:
	case resuming:
		msg += "; resuming it from its last checkpoint"
	default:
		msg += "; continue it with scavctl run --resume " + j.ID
	}
	now := time.Now().UTC()
	j.State, j.Ended, j.ExitCode, j.Message = state, &now, &code, msg
	if k := len(j.Attempts); k > 0 && (j.Attempts[k-1].Ended == nil || j.Attempts[k-1].EndReason == endLost) {
		j.Attempts[k-1].Ended, j.Attempts[k-1].EndReason = &now, reason
	}
	if b, ok := g.o.Launcher.(plugins.Biller); ok && !again {
		chargeJob(ctx, b, j, true, g.log)
	}
	if _, err := rec.commit(ctx); err != nil {
		g.log.Error("record a lost job", zap.String("job", j.ID), zap.Error(err))
	}
	g.log.Warn("job of the previous daemon settled", zap.String("job", j.ID), zap.String("state", string(state)), zap.String("message", msg))
	if resuming && !one.alive && !done {
		b, _ := json.Marshal(telemetry.Event{Kind: telemetry.EventRestarting, Job: j.ID, Attempt: j.Attempt, Message: msg, Time: now})
		if err := g.o.NC.Publish(telemetry.EventSubject(j.ID), b); err != nil {
			g.log.Warn("publish event", zap.String("job", j.ID), zap.Error(err))
		}
	}
	one.rec = rec
	return &telemetry.Event{Kind: telemetry.EventFinished, Job: j.ID, Attempt: j.Attempt, ExitCode: &code, Message: msg, State: string(state), Time: now}
}
