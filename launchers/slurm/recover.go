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
		return fail(fmt.Errorf("Slurm job %s is %q, not this attempt's %q: %w", j.ID, j.Name, jobName(spec), plugins.ErrUnknownHandle))
	}
	out := j.fields["StdOut"]
	if !filepath.IsAbs(out) || j.NumTasks < 1 {
		return fail(errors.New("scontrol shows no output file or no tasks for it"))
	}
	a := newAttempt(l, spec, j.NumTasks)
	a.batch, a.dir, a.jobID = true, filepath.Dir(out), j.ID
	a.logger.Info("reattached to a submitted job", zap.String("id", j.ID), zap.String("state", j.State), zap.String("dir", a.dir))
	go a.watch()
	go a.supervise()
	return a, nil
}
