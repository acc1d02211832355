package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
)

// After a restart, the daemon finds the records of the jobs that were
// running on its node. It reattaches to each attempt whose launcher can
// (plugins.Recoverer: a batch scheduler's jobs outlive the daemon) and
// supervises the job from there; any other is recorded as lost, with the
// checkpoint it can resume from, and what is left of its workers is stopped.

// recoverTimeout bounds reattaching to one attempt.
const recoverTimeout = 2 * time.Minute

// orphanStopper is a launcher that can find and stop what is left of an
// attempt a previous daemon started (the local launcher: its process group).
type orphanStopper interface {
	StopOrphaned(ctx context.Context, spec plugins.RecoverSpec) (int, error)
}

// adopt resumes supervising the jobs that were running on this node when the
// previous daemon ended.
func (s *supervisor) adopt(ctx context.Context) error {
	jobs, err := listJobs(ctx, s.kv)
	if err != nil {
		return fmt.Errorf("adopt running jobs: %w", err)
	}
	for _, j := range jobs {
		if j.State.Done() || j.Node != s.node {
			continue
		}
		env, err := s.loadEnv(j.ID)
		if err != nil {
			s.log.Warn("environment of a job to adopt", zap.String("job", j.ID), zap.Error(err))
		}
		from := resumePoint{attempt: max(j.Attempt, 1), reattach: true}
		if err := s.launch(ctx, j, env, from, fmt.Sprintf("reattaching to attempt %d after a restart of scavd", from.attempt)); err != nil {
			return fmt.Errorf("adopt job %s: %w", j.ID, err)
		}
	}
	return nil
}

// reattach recovers the running attempt of an adopted job through the launcher.
func (s *supervisor) reattach(r *running, spec plugins.AttemptSpec) (plugins.Handle, error) {
	j := r.snapshot()
	k := len(j.Attempts)
	if k == 0 || j.Attempts[k-1].Attempt != spec.Attempt || j.Attempts[k-1].Handle == "" {
		return nil, errors.New("its record names no running attempt to reattach to")
	}
	if j.Launcher != s.launcher.Name() {
		return nil, fmt.Errorf("it was started by launcher %s and this scavd uses %s", j.Launcher, s.launcher.Name())
	}
	rs := plugins.RecoverSpec{JobID: j.ID, Attempt: spec.Attempt, HandleID: j.Attempts[k-1].Handle, Output: spec.Output}
	rec, ok := s.launcher.(plugins.Recoverer)
	if !ok {
		return nil, fmt.Errorf("launcher %s cannot reattach to attempts: %w", s.launcher.Name(), plugins.ErrUnsupported)
	}
	ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
	defer cancel()
	h, err := rec.Recover(ctx, rs)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.lastStep = j.Attempts[k-1].LastStep
	r.mu.Unlock()
	return h, nil
}

// lost records an adopted job whose attempt could not be reattached as
// failed, with the checkpoint it can resume from, and stops what is left
// of its workers when the launcher can find them.
func (s *supervisor) lost(r *running, cause error) {
	j := r.snapshot()
	left := ""
	if k := len(j.Attempts); k > 0 {
		if st, ok := s.launcher.(orphanStopper); ok && j.Attempts[k-1].Handle != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			n, err := st.StopOrphaned(ctx, plugins.RecoverSpec{JobID: j.ID, Attempt: j.Attempts[k-1].Attempt, HandleID: j.Attempts[k-1].Handle})
			cancel()
			switch {
			case err != nil:
				s.log.Warn("stop what is left of a lost attempt", zap.String("job", j.ID), zap.Error(err))
			case n > 0:
				left = fmt.Sprintf("; its %d leftover worker processes were killed", n)
			}
		}
	}
	msg := fmt.Sprintf("scavd restarted while the job ran and cannot reattach to it (%v)%s", cause, left)
	if ckpt, step := s.latestCheckpoint(r); ckpt != "" {
		r.update(func(j *Job) { j.Resume = &ResumePoint{Checkpoint: ckpt, Step: step} })
		msg += fmt.Sprintf("; continue from the checkpoint of step %d with: scavctl run --resume %s", step, j.ID)
	}
	r.endAttempt("lost: scavd restarted", nil)
	s.finish(r, nil, 1, msg, StateFailed)
}

// envPath is where a job's worker environment is kept while it runs, so
// that a restarted daemon can relaunch it (mode 0600: it may hold secrets).
func (s *supervisor) envPath(id string) string { return filepath.Join(s.envDir, id+".json") }

// saveEnv keeps env for a later adoption of job id.
func (s *supervisor) saveEnv(id string, env []string) error {
	if err := os.MkdirAll(s.envDir, 0o700); err != nil {
		return fmt.Errorf("save environment of job %s: %w", id, err)
	}
	b, err := json.Marshal(env)
	if err != nil {
		return fmt.Errorf("save environment of job %s: %w", id, err)
	}
	if err := os.WriteFile(s.envPath(id), b, 0o600); err != nil {
		return fmt.Errorf("save environment of job %s: %w", id, err)
	}
	return nil
}

// loadEnv reads what saveEnv kept (nil when nothing was).
func (s *supervisor) loadEnv(id string) ([]string, error) {
	b, err := os.ReadFile(s.envPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load environment of job %s: %w", id, err)
	}
	var env []string
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("load environment of job %s: %w", id, err)
	}
	return env, nil
}
