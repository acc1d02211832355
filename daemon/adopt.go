package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/scavenger-ml/scavenger/plugins"
)

// After a restart, the daemon finds the records of the jobs that were
// running on its node (restart.go). It reattaches to each attempt whose
// launcher can (plugins.Recoverer: a batch scheduler's jobs outlive the
// daemon) and supervises the job from there; for the others, it kills what
// is left of their workers when the launcher can find them (orphanStopper).

// recoverTimeout bounds reattaching to one attempt.
const recoverTimeout = 2 * time.Minute

// orphanStopper is a launcher that can find and stop what is left of an
// attempt a previous daemon started (the local launcher: its process group).
type orphanStopper interface {
	StopOrphaned(ctx context.Context, spec plugins.RecoverSpec) (int, error)
}

// canReattach reports whether the running attempt of j, started by the
// daemon before a restart, can be recovered through this daemon's launcher.
func (s *supervisor) canReattach(j Job) bool {
	k := len(j.Attempts)
	_, ok := s.launcher.(plugins.Recoverer)
	return ok && k > 0 && j.Attempts[k-1].Handle != "" && j.Attempts[k-1].Ended == nil && j.Launcher == s.launcher.Name()
}

// stopLeftovers kills what is left of the workers of a job that cannot be
// reattached, when the launcher can find them; it says how many it killed.
func (s *supervisor) stopLeftovers(ctx context.Context, j Job) (int, error) {
	k := len(j.Attempts)
	st, ok := s.launcher.(orphanStopper)
	if !ok || k == 0 || j.Attempts[k-1].Handle == "" || j.Launcher != s.launcher.Name() {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return st.StopOrphaned(ctx, plugins.RecoverSpec{JobID: j.ID, Attempt: j.Attempts[k-1].Attempt, HandleID: j.Attempts[k-1].Handle})
}

// reattach recovers the running attempt of an adopted job through the launcher.
func (s *supervisor) reattach(r *running, spec plugins.AttemptSpec) (plugins.Handle, error) {
	j := r.snapshot()
	k := len(j.Attempts)
	if !s.canReattach(j) || j.Attempts[k-1].Attempt != spec.Attempt {
		return nil, errors.New("its record names no running attempt this launcher can reattach to")
	}
	rs := plugins.RecoverSpec{JobID: j.ID, Attempt: spec.Attempt, HandleID: j.Attempts[k-1].Handle, Output: spec.Output}
	ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
	defer cancel()
	h, err := s.launcher.(plugins.Recoverer).Recover(ctx, rs)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.lastStep = j.Attempts[k-1].LastStep
	r.mu.Unlock()
	return h, nil
}

// lost records an adopted job whose attempt could not be reattached as
// failed, with the checkpoint it can resume from.
func (s *supervisor) lost(r *running, cause error) {
	j := r.snapshot()
	msg := fmt.Sprintf("lost: scavd restarted while the job ran and could not reattach to it (%v)", cause)
	switch n, err := s.stopLeftovers(context.Background(), j); {
	case err != nil:
		msg += fmt.Sprintf("; its workers may still run (%v): stop them before resuming it", err)
	case n > 0:
		msg += fmt.Sprintf("; what was left of it (%d) was stopped", n)
	}
	if ckpt, step := s.latestCheckpoint(r); ckpt != "" {
		r.update(func(j *Job) { j.Resume = &ResumePoint{Checkpoint: ckpt, Step: step} })
		msg += fmt.Sprintf("; continue from the checkpoint of step %d with: scavctl run --resume %s", step, j.ID)
	}
	r.endAttempt("lost: scavd restarted", nil)
	s.finish(r, nil, 1, msg, StateFailed)
}
