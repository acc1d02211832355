package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
)

// After a restart, the registry finds the records of the jobs that were
// running on its node (restart.go). It reattaches to each attempt whose
// launcher can (plugins.Recoverer: a batch scheduler's jobs outlive the
// daemon) and runs the job from there; for the others, it kills what is
// left of their workers when the launcher can find them (orphanStopper).

// recoverTimeout bounds reattaching to one attempt.
const recoverTimeout = 2 * time.Minute

// orphanStopper is a launcher that can find and stop what is left of an
// attempt a previous daemon started (the local launcher: its process group).
type orphanStopper interface {
	StopOrphaned(ctx context.Context, spec plugins.RecoverSpec) (int, error)
}

// openAttempt is the last attempt of j when its record says it still runs
// under a launcher of this name with a handle to find it by.
func openAttempt(j api.Job, launcher string) (api.Attempt, bool) {
	k := len(j.Attempts)
	if k == 0 || j.Launcher != launcher || j.Attempts[k-1].Handle == "" {
		return api.Attempt{}, false
	}
	return j.Attempts[k-1], true
}

// canReattach reports whether the running attempt of j, started by the
// daemon before a restart, can be recovered through this registry's launcher.
func (g *Registry) canReattach(j api.Job) bool {
	a, ok := openAttempt(j, g.o.Launcher.Name())
	_, rec := g.o.Launcher.(plugins.Recoverer)
	return ok && rec && a.Ended == nil
}

// stopLeftovers kills what is left of the workers of a job that cannot be
// reattached, when the launcher can find them; it says how many it killed.
func (g *Registry) stopLeftovers(ctx context.Context, j api.Job) (int, error) {
	a, ok := openAttempt(j, g.o.Launcher.Name())
	st, can := g.o.Launcher.(orphanStopper)
	if !ok || !can {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return st.StopOrphaned(ctx, plugins.RecoverSpec{JobID: j.ID, Attempt: a.Attempt, HandleID: a.Handle})
}

// reattach recovers the running attempt of an adopted job through the launcher.
func (r *runner) reattach(ctx context.Context, spec plugins.AttemptSpec) (plugins.Handle, error) {
	j := r.rec.job
	a, ok := openAttempt(j, r.g.o.Launcher.Name())
	if !r.g.canReattach(j) || !ok || a.Attempt != spec.Attempt {
		return nil, errors.New("its record names no running attempt this launcher can reattach to")
	}
	ctx, cancel := context.WithTimeout(ctx, recoverTimeout)
	defer cancel()
	h, err := r.g.o.Launcher.(plugins.Recoverer).Recover(ctx, plugins.RecoverSpec{JobID: j.ID, Attempt: spec.Attempt, HandleID: a.Handle, Output: spec.Output})
	if err != nil {
		return nil, err
	}
	r.prog.begin(a.Attempt, a.LastStep, a.FirstStep, a.LastStep)
	return h, nil
}

// lost is the ending of an adopted job whose attempt could not be
// reattached: failed, with the checkpoint it can resume from.
func (r *runner) lost(ctx context.Context, cause error) ending {
	j := r.rec.job
	msg := fmt.Sprintf("lost: scavd restarted while the job ran and could not reattach to it (%v)", cause)
	switch n, err := r.g.stopLeftovers(ctx, j); {
	case err != nil:
		msg += fmt.Sprintf("; its workers may still run (%v): stop them before resuming it", err)
	case n > 0:
		msg += fmt.Sprintf("; what was left of it (%d) was stopped", n)
	}
	e := ending{state: api.StateFailed, code: 1, why: "lost: scavd restarted"}
	if ckpt, step := r.latestCheckpoint(); ckpt != "" {
		e.resume = &api.ResumePoint{Checkpoint: ckpt, Step: step}
		msg += fmt.Sprintf("; continue from the checkpoint of step %d with: scavctl run --resume %s", step, j.ID)
	}
	e.msg = msg
	return e
}
