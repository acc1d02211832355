package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/jsonfile"
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

// RestartSubdir, in the daemon's state directory, holds the environments of
// the jobs to resume after a restart (Options.RestartDir).
const RestartSubdir = "restart"

type restartEntry struct {
	Job string   `json:"job"`
	Env []string `json:"env"`
}

// rememberEnv keeps a job's environment for the next daemon.
func (g *Registry) rememberEnv(id string, env []string) {
	if g.o.RestartDir == "" {
		return
	}
	if err := os.MkdirAll(g.o.RestartDir, 0o700); err == nil {
		if err = jsonfile.Write(filepath.Join(g.o.RestartDir, id+".json"), restartEntry{Job: id, Env: env}, 0o600); err == nil {
			return
		}
	}
	g.log.Warn("keep environment for a restart; the job will not resume by itself", zap.String("job", id))
}

// forgetEnv drops a job's kept environment.
func (g *Registry) forgetEnv(id string) {
	if g.o.RestartDir != "" {
		_ = os.Remove(filepath.Join(g.o.RestartDir, id+".json"))
	}
}

// keptEnvs reads the kept environments.
func (g *Registry) keptEnvs() map[string][]string {
	out := map[string][]string{}
	if g.o.RestartDir == "" {
		return out
	}
	ents, _ := os.ReadDir(g.o.RestartDir)
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		var re restartEntry
		b, err := os.ReadFile(filepath.Join(g.o.RestartDir, e.Name()))
		if err == nil {
			err = json.Unmarshal(b, &re)
		}
		if err != nil || re.Job != id {
			g.log.Warn("unreadable restart entry", zap.String("file", e.Name()), zap.Error(err))
			continue
		}
		out[id] = re.Env
	}
	return out
}

// Recover settles what a previous daemon on this node left. It reattaches
// to the running attempts whose launcher can (adopt.go); any other record of
// a job it never saw end is marked lost, after what is left of its workers
// is killed; and with ResumeJobs the jobs it stopped at shutdown (or lost)
// resume from their checkpoints.
func (g *Registry) Recover(ctx context.Context) {
	recs, err := list(ctx, g.o.KV)
	if err != nil {
		g.log.Warn("recover jobs", zap.Error(err))
		return
	}
	envs := g.keptEnvs()
	type lostJob struct {
		rec  record
		env  []string
		kept bool
	}
	var lost []lostJob
	for _, rec := range recs {
		j := rec.job
		if j.Node != g.o.Node {
			continue
		}
		env, kept := envs[j.ID]
		delete(envs, j.ID)
		switch {
		case !j.State.Done() && g.canReattach(j):
			from := resumePoint{attempt: j.Attempt, reattach: true}
			if err := g.launch(ctx, rec, env, from, fmt.Sprintf("reattaching to attempt %d after a restart of scavd", j.Attempt)); err != nil {
				g.log.Warn("reattach after restart", zap.String("job", j.ID), zap.Error(err))
			}
		case !j.State.Done():
			lost = append(lost, lostJob{rec, env, kept})
		default:
			g.resumeAfterRestart(ctx, j, env, kept, nil)
		}
	}
	lostJobs := make([]api.Job, len(lost))
	for i, l := range lost {
		lostJobs[i] = l.rec.job
	}
	notes := g.checkpointLeftovers(ctx, lostJobs)
	for _, l := range lost {
		alive, final := g.settleLost(ctx, l.rec, l.kept && g.o.ResumeJobs, notes[l.rec.job.ID])
		g.resumeAfterRestart(ctx, l.rec.job, l.env, l.kept && !alive, final)
	}
	for id := range envs { // records gone
		g.forgetEnv(id)
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
	g.settleLostCost(ctx, j)
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
