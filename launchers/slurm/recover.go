package slurm

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
)

var _ plugins.Recoverer = (*Launcher)(nil)

// Recover reattaches to a job that this launcher submitted before the
// daemon restarted (handle "<job>"): a batch job outlives the daemon. It
// follows the job again and reads its output files from their start, so
// that the ranks' results are read whole; lines the previous daemon
// delivered are delivered again. A job step inside an allocation ended with
// the srun of the daemon that started it: ErrUnsupported. A job that Slurm
// no longer knows, or that is not the attempt's, is ErrUnknownHandle.
func (l *Launcher) Recover(ctx context.Context, rs plugins.RecoverSpec) (plugins.Handle, error) {
	fail := func(err error) (plugins.Handle, error) {
		return nil, fmt.Errorf("recover job %s attempt %d (slurm %s): %w", rs.JobID, rs.Attempt, rs.HandleID, err)
	}
	if strings.Contains(rs.HandleID, ".") {
		return fail(fmt.Errorf("a job step ends with the srun that started it: %w", plugins.ErrUnsupported))
	}
	if _, err := strconv.Atoi(rs.HandleID); err != nil {
		return fail(fmt.Errorf("not a Slurm job id: %w", plugins.ErrUnknownHandle))
	}
	spec := plugins.AttemptSpec{JobID: rs.JobID, Attempt: rs.Attempt, Output: rs.Output}
	j, err := l.job(ctx, rs.HandleID)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", plugins.ErrUnknownHandle, err))
	}
	if j.Name != jobName(spec) {
		return fail(fmt.Errorf("slurm job %s is %q, not this attempt's %q: %w", j.ID, j.Name, jobName(spec), plugins.ErrUnknownHandle))
	}
	out := j.fields["StdOut"]
	if !filepath.IsAbs(out) || j.NumTasks < 1 {
		return fail(errors.New("scontrol shows no output file or no tasks for it"))
	}
	a := newAttempt(l, spec, j.NumTasks, true)
	a.dir, a.jobID = filepath.Dir(out), j.ID
	a.logger.Info("reattached to a submitted job", zap.String("id", j.ID), zap.String("state", j.State), zap.String("dir", a.dir))
	go a.watch()
	go a.supervise()
	return a, nil
}

// StopOrphaned cancels what is left of an attempt that a previous daemon
// started and that cannot be reattached (a job step, whose srun died with
// that daemon), so that it does not run on beside a resumed copy. A step
// or job Slurm no longer runs is nothing to stop. It returns how many
// (0 or 1) it cancelled.
func (l *Launcher) StopOrphaned(ctx context.Context, rs plugins.RecoverSpec) (int, error) {
	job, _, _ := strings.Cut(rs.HandleID, ".")
	if _, err := strconv.Atoi(job); err != nil {
		return 0, fmt.Errorf("stop orphans of job %s attempt %d: %q is not a Slurm job or step id: %w", rs.JobID, rs.Attempt, rs.HandleID, plugins.ErrUnknownHandle)
	}
	j, err := l.job(ctx, job)
	if err != nil || j.final() {
		return 0, nil // gone already
	}
	if !strings.Contains(rs.HandleID, ".") && j.Name != jobName(plugins.AttemptSpec{JobID: rs.JobID, Attempt: rs.Attempt}) {
		return 0, nil // the id is another job's now
	}
	if _, err := l.run(ctx, l.opts.Scancel, rs.HandleID); err != nil {
		if strings.Contains(err.Error(), "Invalid job id") {
			return 0, nil
		}
		return 0, fmt.Errorf("stop orphans of job %s attempt %d: %w", rs.JobID, rs.Attempt, err)
	}
	l.logger.Warn("cancelled what a previous daemon left running", zap.String("job", rs.JobID), zap.Int("attempt", rs.Attempt), zap.String("slurm", rs.HandleID))
	return 1, nil
}
