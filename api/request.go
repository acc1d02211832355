package api

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// RunRequest asks the daemon to run a job (the body of scav.api.run).
type RunRequest struct {
	// Name is a human name; the job id is derived from it.
	Name string `json:"name,omitempty"`
	// Command is the training command and its arguments (templates allowed).
	Command []string `json:"command"`
	// Dir is the working directory; Env the complete environment of the workers.
	Dir string   `json:"dir"`
	Env []string `json:"env,omitempty"`
	// Config is the configuration to start at.
	Config plugins.Config `json:"config"`
	// Mode is the launch mode (auto, ranks, self).
	Mode plugins.LaunchMode `json:"mode,omitempty"`
	// CheckpointDir is where the job keeps checkpoints; empty: under the state directory.
	CheckpointDir string `json:"checkpoint_dir,omitempty"`
	// Grace is how long workers get between SIGTERM and SIGKILL when stopped,
	// and how long they get to checkpoint before a move falls back to a stop.
	Grace Duration `json:"grace,omitempty"`
	// CheckpointSignal, for scripts that do not use the python client, is the
	// signal (e.g. "SIGUSR1") that makes them checkpoint into
	// SCAV_CHECKPOINT_DIR and exit, so that they can be moved.
	CheckpointSignal string `json:"checkpoint_signal,omitempty"`
	// StepRegex reads the progress of a script without the python client off
	// its output (named groups step, rate, total); empty: tqdm and "step N"
	// lines. The daemon parses it (telemetry/progress).
	StepRegex string `json:"step_regex,omitempty"`
	// Optimize, when its policy moves, lets the daemon move the job to the
	// configuration that best meets its objective.
	Optimize Optimize `json:"optimize,omitempty"`
	// Allocation is the scheduler allocation the job runs in, as
	// "<scheduler>.<id>" (scavctl run sets "slurm.$SLURM_JOB_ID").
	Allocation string `json:"allocation,omitempty"`
	// MaxRestarts is how many times an attempt that crashed (a worker
	// failed on its own: not a stop, not a move) is restarted from the last
	// complete checkpoint before the job fails; nil: DefaultMaxRestarts.
	MaxRestarts *int `json:"max_restarts,omitempty"`
	// Faults says how the job meets a crash, a stall and a NaN loss.
	Faults Faults `json:"faults,omitempty"`
}

// DefaultMaxRestarts is a job's MaxRestarts unless it names one (torchrun's
// --max-restarts convention); MaxMaxRestarts bounds what it may name.
const (
	DefaultMaxRestarts = 3
	MaxMaxRestarts     = 100
)

// Validate collects every problem with the request that the request shows
// by itself. Whether its policy can be built and its step regex parsed
// needs the optimizer and the progress parser: the daemon checks those too
// (daemon/control.Check), through ValidateWith.
func (r *RunRequest) Validate() error { return r.ValidateWith(nil) }

// ValidateWith is Validate with the problems more finds (nil: none), which
// take their place among Validate's, after the checks of the optimization
// ranges and before those of the allocation.
func (r *RunRequest) ValidateWith(more func(*RunRequest) []error) error {
	var errs []error
	if len(r.Command) == 0 || r.Command[0] == "" {
		errs = append(errs, errors.New("no command: give it after --, e.g. scavctl run -- python train.py"))
	}
	if r.Name != "" && !telemetry.ValidJobID(r.Name) {
		errs = append(errs, fmt.Errorf("name %q: use 1-64 letters, digits, '-' or '_'", r.Name))
	}
	if r.Config.Workers < 1 {
		errs = append(errs, fmt.Errorf("workers %d: need at least 1", r.Config.Workers))
	}
	if err := r.selfLaunched(); err != nil {
		errs = append(errs, err)
	}
	if r.Config.GlobalBatch < 0 {
		errs = append(errs, fmt.Errorf("batch size %d: must not be negative", r.Config.GlobalBatch))
	}
	if r.Config.Workers > 0 && r.Config.GlobalBatch > 0 && r.Config.GlobalBatch%r.Config.Workers != 0 {
		errs = append(errs, fmt.Errorf("batch size %d is not divisible by %d workers", r.Config.GlobalBatch, r.Config.Workers))
	}
	for _, kv := range r.Env {
		if k, _, _ := strings.Cut(kv, "="); plugins.IsContractEnv(k) {
			errs = append(errs, fmt.Errorf("--env %s: Scavenger sets %s for each worker; it may not be given", k, k))
		}
	}
	if r.Dir != "" && !filepath.IsAbs(r.Dir) {
		errs = append(errs, fmt.Errorf("working directory %q is not absolute", r.Dir))
	}
	if m := r.MaxRestarts; m != nil && (*m < 0 || *m > MaxMaxRestarts) {
		errs = append(errs, fmt.Errorf("--max-restarts %d: use 0 to %d", *m, MaxMaxRestarts))
	}
	if g := r.Grace.D(); g < 0 || g > MaxGrace {
		errs = append(errs, fmt.Errorf("grace %s: use 0 to %s (a stop, and a daemon's shutdown, wait for it)", g, MaxGrace))
	}
	errs = append(errs, r.Optimize.signs()...)
	if err := r.Faults.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o := r.Optimize; !o.Active() && (o.MinWorkers != o.MaxWorkers || o.MinBatch != o.MaxBatch || len(o.Types) > 1) {
		errs = append(errs, fmt.Errorf("ranges of workers or batch, and several machine types, need a moving policy (scavenger, adaptive or full), not %q", cmp.Or(o.Policy, "fixed")))
	}
	if k := r.Optimize.ModelKey; k != "" && !ModelKeyPattern.MatchString(k) {
		errs = append(errs, fmt.Errorf("--model-key %q: use 1-64 letters, digits, '-' or '_'", k))
	}
	if more != nil {
		errs = append(errs, more(r)...)
	}
	if r.Allocation != "" && !ValidAllocationKey(r.Allocation) {
		errs = append(errs, fmt.Errorf("allocation %q: want <scheduler>.<id>, e.g. slurm.4711", r.Allocation))
	}
	if r.CheckpointSignal != "" {
		if _, err := ParseSignal(r.CheckpointSignal); err != nil {
			errs = append(errs, fmt.Errorf("checkpoint signal: %w", err))
		}
	}
	switch r.Mode {
	case "", plugins.ModeAuto, plugins.ModeRanks, plugins.ModeSelf:
	default:
		errs = append(errs, fmt.Errorf("launch mode %q: use auto, ranks or self", r.Mode))
	}
	return errors.Join(errs...)
}

// API verbs served on scav.api.<verb>.
const (
	VerbPing   = "ping"
	VerbRun    = "run"
	VerbStop   = "stop"
	VerbJob    = "job"
	VerbJobs   = "jobs"
	VerbStats  = "stats"
	VerbMove   = "move"
	VerbResume = "resume"
	// VerbAllocation reports a scheduler allocation's begin or end (prolog/epilog hooks).
	VerbAllocation = "allocation"
	// VerbAllocations lists the allocations the hooks reported.
	VerbAllocations = "allocations"
	// VerbList reads a page of the job index; VerbResolve names a job by
	// id, id prefix or name; VerbKeep exempts a finished job from retention.
	VerbList    = "list"
	VerbResolve = "resolve"
	VerbKeep    = "keep"
	// VerbStepDigest reads what a job's step records add up to (the
	// maintained aggregate of daemon/aggregates, up to date).
	VerbStepDigest = "step-digest"
)

// ResumeRequest asks the daemon to continue a stopped job from its last
// checkpoint (the body of scav.api.resume); Env is the workers' environment.
type ResumeRequest struct {
	Job string   `json:"job"`
	Env []string `json:"env,omitempty"`
}

// MoveRequest asks the daemon to relaunch a running job at another
// configuration (the body of scav.api.move). The reply comes once the
// workers have checkpointed and exited, or the move has failed.
type MoveRequest struct {
	Job    string         `json:"job"`
	Config plugins.Config `json:"config"`
	Reason string         `json:"reason,omitempty"`
	// Pin, when set, pins the job at Config (true: its policy moves it no
	// more) or releases it (false); a Config the job already runs at is then
	// no move.
	Pin *bool `json:"pin,omitempty"`
}

// StopRequest asks the daemon to stop a job (the body of scav.api.stop).
type StopRequest struct {
	Job   string   `json:"job"`
	Grace Duration `json:"grace,omitempty"`
}

// JobRequest names a job (the body of scav.api.job).
type JobRequest struct {
	Job string `json:"job"`
}

// Timeout bounds the work of a request of verb; a move waits for the
// workers to checkpoint, and a step digest may have a long history to fold
// the first time (a job of a store older than the digests).
func Timeout(verb string) time.Duration {
	switch verb {
	case VerbMove:
		return 10 * time.Minute
	case VerbStepDigest:
		return 2 * time.Minute
	}
	return 10 * time.Second
}

// Reply is the envelope of every API answer: Error, or Data.
type Reply struct {
	Error string          `json:"error,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
}

// selfLaunched refuses a command that starts its own workers (torchrun,
// --mode self) when Scavenger may choose how many, unless the command is
// told the number through {workers}: else the job would believe it runs one
// worker while the command starts its own count.
func (r *RunRequest) selfLaunched() error {
	if plugins.ResolveMode(r.Mode, r.Command) != plugins.ModeSelf {
		return nil
	}
	for _, a := range r.Command {
		if strings.Contains(a, plugins.PlaceholderWorkers) {
			return nil
		}
	}
	if !r.Optimize.Active() || r.Optimize.MaxWorkers <= r.Optimize.MinWorkers {
		return nil // a fixed count: the command says it as it likes
	}
	cmd := "torchrun"
	if len(r.Command) > 0 {
		cmd = filepath.Base(r.Command[0])
	}
	return fmt.Errorf("%s starts its own workers, so it must be told how many Scavenger chose: put {workers} in the command, e.g. %s --nproc_per_node={workers} ... (and {local_batch_size} for the batch)", cmd, cmd)
}
