package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

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
// adopt.go). It marks the others failed ("lost"), after killing what is
// left of their workers, and with ResumeJobs resumes them from their last
// checkpoint (unless the leftovers could not be killed: then it says so
// instead of starting a second copy).

// restartDir holds the environments of the jobs to resume after a restart.
const restartDir = "restart"

type restartEntry struct {
	Job string   `json:"job"`
	Env []string `json:"env"`
}

// rememberEnv keeps a job's environment for the next daemon.
func (s *supervisor) rememberEnv(id string, env []string) {
	if s.restartDir == "" {
		return
	}
	b, _ := json.Marshal(restartEntry{Job: id, Env: env})
	if err := os.MkdirAll(s.restartDir, 0o700); err == nil {
		tmp := filepath.Join(s.restartDir, id+".json.tmp")
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, filepath.Join(s.restartDir, id+".json"))
		}
		if err == nil {
			return
		}
	}
	s.log.Warn("keep environment for a restart; the job will not resume by itself", zap.String("job", id))
}

// forgetEnv drops a job's kept environment.
func (s *supervisor) forgetEnv(id string) {
	if s.restartDir != "" {
		_ = os.Remove(filepath.Join(s.restartDir, id+".json"))
	}
}

// keptEnvs reads the kept environments.
func (s *supervisor) keptEnvs() map[string][]string {
	out := map[string][]string{}
	if s.restartDir == "" {
		return out
	}
	ents, _ := os.ReadDir(s.restartDir)
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		var re restartEntry
		b, err := os.ReadFile(filepath.Join(s.restartDir, e.Name()))
		if err == nil {
			err = json.Unmarshal(b, &re)
		}
		if err != nil || re.Job != id {
			s.log.Warn("unreadable restart entry", zap.String("file", e.Name()), zap.Error(err))
			continue
		}
		out[id] = re.Env
	}
	return out
}

// shuttingDown reports whether close has begun.
func (s *supervisor) shuttingDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// recoverJobs settles what a previous daemon on this node left. It
// reattaches to the running attempts whose launcher can (adopt.go); any
// other record of a job it never saw end is marked lost, after what is left
// of its workers is killed; and with resumeJobs the jobs it stopped at
// shutdown (or lost) resume from their checkpoints.
func (s *supervisor) recoverJobs(ctx context.Context) {
	jobs, err := listJobs(ctx, s.kv)
	if err != nil {
		s.log.Warn("recover jobs", zap.Error(err))
		return
	}
	envs := s.keptEnvs()
	for _, j := range jobs {
		if j.Node != s.node {
			continue
		}
		env, kept := envs[j.ID]
		delete(envs, j.ID)
		if !j.State.Done() && s.canReattach(j) {
			from := resumePoint{attempt: j.Attempt, reattach: true}
			if err := s.launch(ctx, j, env, from, fmt.Sprintf("reattaching to attempt %d after a restart of scavd", j.Attempt)); err != nil {
				s.log.Warn("reattach after restart", zap.String("job", j.ID), zap.Error(err))
			}
			continue
		}
		alive := false
		if !j.State.Done() {
			msg := "lost: the scavd that ran it exited without stopping it (killed, crashed or timed out by the watchdog)"
			switch n, err := s.stopLeftovers(ctx, j); {
			case err != nil:
				alive = true
				msg += fmt.Sprintf("; its workers may still run, unsupervised (%v): stop them, then scavctl run --resume %s", err, j.ID)
			case n > 0:
				msg += fmt.Sprintf("; its %d leftover worker processes were killed", n)
			}
			if !alive {
				msg += "; continue it with scavctl run --resume " + j.ID
			}
			s.markLost(ctx, j, msg)
		}
		if !kept {
			continue
		}
		if !s.resumeJobs || alive || j.State == StateSucceeded {
			s.forgetEnv(j.ID)
			continue
		}
		switch rj, err := s.resume(ctx, j.ID, env); {
		case err != nil:
			s.forgetEnv(j.ID)
			s.log.Warn("job not resumed after restart", zap.String("job", j.ID), zap.Error(err))
		default:
			s.log.Info("job resumed after restart", zap.String("job", j.ID), zap.Int("attempt", rj.Attempt+1))
		}
	}
	for id := range envs { // records gone
		s.forgetEnv(id)
	}
}

// markLost records that a job's supervision ended with its daemon.
func (s *supervisor) markLost(ctx context.Context, j Job, msg string) {
	now := time.Now().UTC()
	code := -1
	j.State, j.Ended, j.ExitCode, j.Message = StateFailed, &now, &code, msg
	if k := len(j.Attempts); k > 0 && j.Attempts[k-1].Ended == nil {
		j.Attempts[k-1].Ended, j.Attempts[k-1].EndReason = &now, "lost"
	}
	s.save(ctx, j)
	s.event(telemetry.Event{Kind: telemetry.EventFinished, Job: j.ID, Attempt: j.Attempt, ExitCode: &code, Message: msg})
	s.log.Warn("job lost by the previous daemon", zap.String("job", j.ID), zap.String("message", msg))
}
