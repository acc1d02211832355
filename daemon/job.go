package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/progress"
)

// JobState is where a job is in its life.
//
//	starting -> running -> succeeded | failed
//	    |          |
//	    |          +--> stopping -> stopped | failed
//	    +--> failed (the launcher could not start it)
type JobState string

// Job states.
const (
	StateStarting  JobState = "starting"
	StateRunning   JobState = "running"
	StateStopping  JobState = "stopping"
	StateSucceeded JobState = "succeeded"
	StateFailed    JobState = "failed"
	StateStopped   JobState = "stopped"
)

// Done reports whether the state is final.
func (s JobState) Done() bool {
	return s == StateSucceeded || s == StateFailed || s == StateStopped
}

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
	// its output (named groups step, rate, total); empty: tqdm and "step N" lines.
	StepRegex string `json:"step_regex,omitempty"`
	// Optimize, when its policy moves, lets the daemon move the job to the
	// configuration that best meets its objective.
	Optimize Optimize `json:"optimize,omitempty"`
	// Allocation is the scheduler allocation the job runs in, as
	// "<scheduler>.<id>" (scavctl run sets "slurm.$SLURM_JOB_ID").
	Allocation string `json:"allocation,omitempty"`
}

// Validate collects every problem with the request.
func (r *RunRequest) Validate() error {
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
	if r.Config.GlobalBatch < 0 {
		errs = append(errs, fmt.Errorf("batch size %d: must not be negative", r.Config.GlobalBatch))
	}
	if r.Config.Workers > 0 && r.Config.GlobalBatch > 0 && r.Config.GlobalBatch%r.Config.Workers != 0 {
		errs = append(errs, fmt.Errorf("batch size %d is not divisible by %d workers", r.Config.GlobalBatch, r.Config.Workers))
	}
	if r.Dir != "" && !filepath.IsAbs(r.Dir) {
		errs = append(errs, fmt.Errorf("working directory %q is not absolute", r.Dir))
	}
	if r.Grace.D() < 0 {
		errs = append(errs, fmt.Errorf("grace %s: must not be negative", r.Grace.D()))
	}
	if r.Optimize.Active() {
		spec, _, err := policySpec(r.Optimize, r.Config, 0)
		if err == nil {
			_, err = policy.New(r.Optimize.Policy, spec, nil)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := progress.New(r.StepRegex); err != nil {
		errs = append(errs, err)
	}
	if r.Allocation != "" && !ValidAllocationKey(r.Allocation) {
		errs = append(errs, fmt.Errorf("allocation %q: want <scheduler>.<id>, e.g. slurm.4711", r.Allocation))
	}
	if r.CheckpointSignal != "" {
		if _, err := parseSignal(r.CheckpointSignal); err != nil {
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

// Job is a job's record, kept in the job bucket under its id.
type Job struct {
	ID            string             `json:"id"`
	Name          string             `json:"name"`
	Command       []string           `json:"command"`
	Dir           string             `json:"dir"`
	Config        plugins.Config     `json:"config"`
	Mode          plugins.LaunchMode `json:"mode"`
	CheckpointDir string             `json:"checkpoint_dir"`
	Grace         Duration           `json:"grace"`
	// CheckpointSignal is the signal that makes an uninstrumented job checkpoint.
	CheckpointSignal string `json:"checkpoint_signal,omitempty"`
	// StepRegex reads an uninstrumented job's progress off its output.
	StepRegex string `json:"step_regex,omitempty"`
	Node      string `json:"node"`
	Launcher  string `json:"launcher"`
	// Allocation is the scheduler allocation the job runs in ("slurm.4711").
	Allocation string     `json:"allocation,omitempty"`
	State      JobState   `json:"state"`
	Attempt    int        `json:"attempt"`
	Created    time.Time  `json:"created"`
	Started    *time.Time `json:"started,omitempty"`
	Ended      *time.Time `json:"ended,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	// Optimize is what the job asked of the optimizer; Phase is where its
	// policy is (warm-up, probing, optimised) and Decisions what it decided.
	Optimize  Optimize   `json:"optimize,omitempty"`
	Phase     string     `json:"phase,omitempty"`
	Decisions []Decision `json:"decisions,omitempty"`
	// Attempts lists the job's launches, the latest last.
	Attempts []Attempt `json:"attempts,omitempty"`
	// Resume is where a stopped job can continue (scavctl run --resume).
	Resume *ResumePoint `json:"resume,omitempty"`
	// Result is how the last attempt ended, rank by rank.
	Result *plugins.Result `json:"result,omitempty"`
	// Message says in words why the job is in its state, when it is not obvious.
	Message string `json:"message,omitempty"`
}

// ResumePoint is a checkpoint a job can continue from.
type ResumePoint struct {
	Checkpoint string `json:"checkpoint"`
	Step       int64  `json:"step"`
}

// newJobID derives a job id from a name and six random hex digits.
func newJobID(name string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}

// defaultName makes a job name from the command: the first argument that is
// not an interpreter or a flag ("python3 train.py" -> "train").
func defaultName(cmd []string) string {
	pick := ""
	for _, a := range cmd {
		base := filepath.Base(a)
		if pick == "" {
			pick = base
		}
		if strings.HasPrefix(a, "-") || strings.ContainsAny(a, "{}= \t") || isInterpreter(base) {
			continue
		}
		pick = base
		break
	}
	pick = strings.TrimSuffix(pick, filepath.Ext(pick))
	out := make([]byte, 0, 32)
	for i := 0; i < len(pick) && len(out) < 32; i++ {
		if c := pick[i]; telemetry.ValidJobID(string(c)) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return "job"
	}
	return string(out)
}

func isInterpreter(base string) bool {
	switch {
	case strings.HasPrefix(base, "python"), base == "torchrun", base == "env", base == "sh", base == "bash":
		return true
	}
	return false
}

// Duration is a time.Duration that reads and writes as "30s" in JSON.
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("parse duration %q: %w", b, err)
	}
	*d = Duration(v)
	return nil
}
