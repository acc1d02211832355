package api

import (
	"fmt"
	"time"

	"github.com/scavenger-ml/scavenger/plugins"
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

// Phase is where a job's policy is in its search, as its record and events
// carry it (the optimizer's policy.Phase, by value).
type Phase string

// The phases of a job's policy.
const (
	// PhaseWarmup: waiting for a stable noise estimate before deciding.
	PhaseWarmup Phase = "warm-up"
	// PhaseProbing: measuring configurations to fit the model.
	PhaseProbing Phase = "probing"
	// PhaseOptimised: running at the configuration the policy chose (or
	// staying where it is because searching does not pay).
	PhaseOptimised Phase = "optimised"
)

// Job is a job's record, kept in the job bucket under its id.
type Job struct {
	// ID names the job: its Name and six random hex digits.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Command and Dir are what the workers run, and where.
	Command []string `json:"command"`
	Dir     string   `json:"dir"`
	// Config is the configuration the job runs at now (or last ran at).
	Config plugins.Config     `json:"config"`
	Mode   plugins.LaunchMode `json:"mode"`
	// CheckpointDir is where the job's checkpoints go (SCAV_CHECKPOINT_DIR).
	CheckpointDir string `json:"checkpoint_dir"`
	// Grace is how long the workers get to checkpoint and exit when stopped.
	Grace Duration `json:"grace"`
	// CheckpointSignal is the signal that makes an uninstrumented job checkpoint.
	CheckpointSignal string `json:"checkpoint_signal,omitempty"`
	// StepRegex reads an uninstrumented job's progress off its output.
	StepRegex string `json:"step_regex,omitempty"`
	// Owner is the user who submitted the job: its workers run as them, and
	// only they (or root) may act on it or read it. Records written before
	// owners were kept have none: they are root's.
	Owner *Owner `json:"owner,omitempty"`
	// Node is the daemon's node that runs the job; Launcher the launcher it uses.
	Node     string `json:"node"`
	Launcher string `json:"launcher"`
	// Allocation is the scheduler allocation the job runs in ("slurm.4711").
	Allocation string   `json:"allocation,omitempty"`
	State      JobState `json:"state"`
	// Attempt is the number of the current (or last) attempt, from 1.
	Attempt int `json:"attempt"`
	// Created, Started and Ended are when the job was submitted, first
	// started and ended; ExitCode is its exit status once it has ended.
	Created  time.Time  `json:"created"`
	Started  *time.Time `json:"started,omitempty"`
	Ended    *time.Time `json:"ended,omitempty"`
	ExitCode *int       `json:"exit_code,omitempty"`
	// Optimize is what the job asked of the optimizer; Phase is where its
	// policy is (warm-up, probing, optimised) and Decisions what it decided.
	Optimize  Optimize   `json:"optimize,omitempty"`
	Phase     Phase      `json:"phase,omitempty"`
	Decisions []Decision `json:"decisions,omitempty"`
	// Pinned holds the job at its configuration (scavctl move --pin): its
	// policy goes on deciding, but moves it no more until unpinned.
	Pinned bool `json:"pinned,omitempty"`
	// Attempts lists the job's launches, the latest last.
	Attempts []Attempt `json:"attempts,omitempty"`
	// MaxRestarts is how many crashed attempts the job restarts from its
	// last checkpoint; Restarts how many it has restarted so far.
	MaxRestarts int `json:"max_restarts"`
	Restarts    int `json:"restarts,omitempty"`
	// Faults says how the job meets a crash, a stall and a NaN loss.
	Faults Faults `json:"faults,omitempty"`
	// Stalled is set while the job's ranks report no step (a watchdog's
	// verdict, see Faults.StallTimeout); BadLoss once its loss turned NaN
	// or infinite.
	Stalled *Stall   `json:"stalled,omitempty"`
	BadLoss *BadLoss `json:"bad_loss,omitempty"`
	// Resume is where a stopped job can continue (scavctl run --resume).
	Resume *ResumePoint `json:"resume,omitempty"`
	// Result is how the last attempt ended, rank by rank.
	Result *plugins.Result `json:"result,omitempty"`
	// Message says in words why the job is in its state, when it is not obvious.
	Message string `json:"message,omitempty"`
	// Cost is the sum of its attempts' costs (cloudvm).
	Cost *Cost `json:"cost,omitempty"`
	// Output counts the job's output lines (daemon/jobs/outputcap.go).
	Output *OutputStats `json:"output,omitempty"`
}

// BaseBatch is the batch the job's gradient noise scale is measured
// against: its first attempt's global batch (the configured one before any
// attempt).
func (j Job) BaseBatch() int {
	if len(j.Attempts) > 0 {
		return j.Attempts[0].Config.GlobalBatch
	}
	return j.Config.GlobalBatch
}

// OutputStats count a job's output lines as its history keeps them: the
// first lines whole (its head), then only the newest.
type OutputStats struct {
	// Lines is how many lines the workers wrote, over all attempts.
	Lines int64 `json:"lines"`
	// HeadBytes is how many bytes of them the head holds; Tail is set once
	// the head is full.
	HeadBytes int64 `json:"head_bytes"`
	Tail      bool  `json:"tail,omitempty"`
	// Dropped counts the lines the daemon dropped because the job wrote
	// faster than it publishes, or past its owner's output quota.
	Dropped int64 `json:"dropped,omitempty"`
	// Bytes is what the published lines take in the output history (their
	// text and an allowance for each line's framing): what the job counts
	// for against its owner's quota. Purged says that its output was
	// removed from the history to make room for its owner's newer jobs.
	Bytes  int64 `json:"bytes,omitempty"`
	Purged bool  `json:"purged,omitempty"`
}

// Owner is a user as the daemon knows them: from the kernel (the peer
// credentials of a local caller) or from the API's token file (a remote one).
type Owner struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	User   string   `json:"user"`
	Home   string   `json:"home,omitempty"`
}

// Root reports whether the owner is root.
func (o Owner) Root() bool { return o.UID == 0 }

// Owns reports whether o may act on job j: o is root, or owns it.
func (o Owner) Owns(j Job) bool {
	return o.Root() || j.Owner != nil && j.Owner.UID == o.UID
}

// ResumePoint is a checkpoint a job can continue from: its path, and the
// last step it holds.
type ResumePoint struct {
	Checkpoint string `json:"checkpoint"`
	Step       int64  `json:"step"`
}

// Attempt is one launch of a job, as kept in its record.
type Attempt struct {
	Attempt int            `json:"attempt"`
	Config  plugins.Config `json:"config"`
	Started time.Time      `json:"started"`
	Ended   *time.Time     `json:"ended,omitempty"`
	// FirstStep and LastStep bound the steps this attempt completed (0: none).
	FirstStep int64 `json:"first_step,omitempty"`
	LastStep  int64 `json:"last_step,omitempty"`
	// Restore is the checkpoint it started from.
	Restore string `json:"restore,omitempty"`
	// Handle is the launcher's id of the attempt, to reattach to it after a
	// daemon restart.
	Handle string `json:"handle,omitempty"`
	// EndReason says why it ended ("finished", "moved: ...", "crashed: ...",
	// "stopped", "failed: ...").
	EndReason string `json:"end_reason,omitempty"`
	// Move breaks down the relaunch that ended this attempt, when one did.
	Move *MoveTiming `json:"move,omitempty"`
	// Cost is what the machines the launcher acquired cost in the attempt
	// (cloudvm; see daemon/jobs/cost.go).
	Cost *Cost `json:"cost,omitempty"`
}

// MoveTiming breaks a relaunch into its parts, in seconds.
type MoveTiming struct {
	// Checkpoint: from the request to rank 0's acknowledgement (the step
	// still to run, then the checkpoint write).
	Checkpoint float64 `json:"checkpoint_s"`
	// Exit: from the acknowledgement to the last worker's exit.
	Exit float64 `json:"exit_s"`
	// Start: from the exit to the new attempt's processes existing.
	Start float64 `json:"start_s,omitempty"`
	// FirstStep: from the start to the new attempt's first step (restore included).
	FirstStep float64 `json:"first_step_s,omitempty"`
	// Fallback is set when the workers did not acknowledge and were stopped.
	Fallback bool `json:"fallback,omitempty"`
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
