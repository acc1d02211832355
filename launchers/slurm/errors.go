package slurm

import "errors"

// Errors of the Slurm launcher. They are wrapped with the operation and the
// Slurm job (and step) they concern; test them with errors.Is.
var (
	// ErrCommand reports a Slurm command (srun, sbatch, scontrol, scancel,
	// sinfo) that failed; the error carries the command's stderr, so that
	// Slurm's reason ("Requested node configuration is not available")
	// reaches the user.
	ErrCommand = errors.New("slurm command failed")
	// ErrStepStart reports an srun job step that ended, or whose output
	// closed, before every task of the attempt had started.
	ErrStepStart = errors.New("job step did not start")
	// ErrJobLost reports a job that Slurm no longer knows while the
	// launcher follows it (purged from slurmctld, or the controller lost
	// its state); the attempt's ranks count as failed.
	ErrJobLost = errors.New("slurm job lost")
	// ErrNoJob reports a missing or malformed allocation: Options.JobID
	// names no running job.
	ErrNoJob = errors.New("no slurm allocation")
)
