// Package plugins holds the launcher contract that scavd and every launcher
// share: the Launcher and Handle interfaces, the attempt specification, the
// worker environment of DESIGN.md §3, the offers and charges of a launcher
// that buys machines, and the errors a launcher returns. It needs the
// standard library only, so that the API's wire types can carry its
// configurations; the go-plugin/gRPC transport for external launchers is
// built on these types in plugins/goplugin.
package plugins

import (
	"context"
	"syscall"
	"time"
)

// Stream names which output stream of a worker a line came from.
type Stream string

// The two output streams of a worker.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// OutputFunc receives each line a worker writes, without its newline. It is
// called from the launcher's reader goroutines and must not block for long.
type OutputFunc func(rank int, stream Stream, line string)

// LaunchMode says how a launcher turns a command into processes.
type LaunchMode string

// Launch modes.
const (
	// ModeAuto picks ModeSelf for commands that are launchers themselves
	// (torchrun, python -m torch.distributed.run/launch) and ModeRanks otherwise.
	ModeAuto LaunchMode = "auto"
	// ModeRanks starts one process per worker with the torchrun-compatible environment.
	ModeRanks LaunchMode = "ranks"
	// ModeSelf starts one process; the command (through its template) starts the workers.
	ModeSelf LaunchMode = "self"
)

// Config is one point of the configuration space a job can run at.
type Config struct {
	// Workers is the number of data-parallel workers (replicas), K.
	Workers int `json:"workers"`
	// GlobalBatch is the batch summed over all workers, B.
	GlobalBatch int `json:"global_batch"`
	// MachineType names the machine type, when the launcher chooses machines.
	MachineType string `json:"machine_type,omitempty"`
	// Market is how those machines are bought (MarketSpot or
	// MarketOnDemand; empty: the launcher's default).
	Market string `json:"market,omitempty"`
	// Nodes is the number of machines the workers are spread over (0: the launcher decides).
	Nodes int `json:"nodes,omitempty"`
	// LRScale is the learning-rate factor relative to the job's starting batch (1 when unchanged).
	LRScale float64 `json:"lr_scale,omitempty"`
}

// LocalBatch is the per-worker batch, B/K rounded down (0 when unknown).
func (c Config) LocalBatch() int {
	if c.Workers <= 0 {
		return 0
	}
	return c.GlobalBatch / c.Workers
}

// AttemptSpec is everything a launcher needs to start one attempt of a job.
type AttemptSpec struct {
	// JobID and Attempt identify the attempt; Attempt counts from 1.
	JobID   string
	Attempt int
	// Command is the user's command and arguments, with {workers},
	// {batch_size} and {local_batch_size} still to be substituted.
	Command []string
	// Dir is the working directory of the workers.
	Dir string
	// Env holds extra KEY=VALUE pairs for every worker (the user's --env and
	// the daemon's additions such as PYTHONPATH), on top of the launcher's own environment.
	Env []string
	// Config is the configuration to run at.
	Config Config
	// Mode says how the command becomes processes.
	Mode LaunchMode
	// Socket is the node daemon's telemetry socket (SCAV_SOCKET).
	Socket string
	// CheckpointDir is where the job keeps its checkpoints (SCAV_CHECKPOINT_DIR).
	CheckpointDir string
	// Restore is the checkpoint to resume from, empty for a fresh start (SCAV_RESTORE).
	Restore string
	// StartStep is the last step the job completed before this attempt, 0 for
	// a fresh start (SCAV_START_STEP); step numbers go on from it.
	StartStep int64
	// Output receives the workers' output lines; nil discards them.
	Output OutputFunc
	// User, when set, is the user the workers run as (the job's owner, when
	// a root daemon runs another user's job); nil: the launcher's own user.
	// Only a launcher whose Capabilities say RunAs takes it.
	User *RunAs
	// Token proves to the node daemon's telemetry socket that a worker
	// belongs to this attempt (SCAV_TOKEN): the python client sends it in
	// its hello, and records on a connection without it are refused.
	Token string
}

// RunAs is a user for workers to run as: their uid, primary and
// supplementary groups, name and home directory (HOME, USER, LOGNAME).
type RunAs struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	Name   string   `json:"name"`
	Home   string   `json:"home"`
}

// RankResult is how one worker process ended.
type RankResult struct {
	Rank     int    `json:"rank"`
	PID      int    `json:"pid"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	// Stopped is true when the launcher stopped this rank (a peer failed, or Stop was called).
	Stopped bool `json:"stopped,omitempty"`
}

// Result is how an attempt ended.
type Result struct {
	// ExitCode is the attempt's exit status: 0 when every rank exited 0, else
	// the code of the first rank that failed on its own (128+n for signal n).
	ExitCode int `json:"exit_code"`
	// FailedRank is the first rank that failed on its own, or -1.
	FailedRank int `json:"failed_rank"`
	// Stopped is true when the attempt ended because Stop was called.
	Stopped bool `json:"stopped,omitempty"`
	// Ranks holds each worker process's end.
	Ranks []RankResult `json:"ranks"`
	// LostHosts names the hosts that were lost during the attempt (they
	// stopped answering or their connection died); their ranks count as
	// failed. A launcher leaves a lost host out of its Capabilities until it
	// answers again, so the job can go on on the others.
	LostHosts []string `json:"lost_hosts,omitempty"`
}

// Capabilities describe what a launcher can start.
type Capabilities struct {
	// MaxWorkers is the most workers one attempt can have (0: unbounded).
	MaxWorkers int `json:"max_workers"`
	// Hosts lists the hosts workers may run on.
	Hosts []string `json:"hosts,omitempty"`
	// MachineTypes lists the machine types the launcher can provide.
	MachineTypes []string `json:"machine_types,omitempty"`
	// RunAs is set when the launcher runs workers as AttemptSpec.User.
	RunAs bool `json:"run_as,omitempty"`
	// Offers are those machine types with their slots and prices now, for
	// a launcher that acquires machines (cloudvm).
	Offers []Offer `json:"offers,omitempty"`
}

// Launcher starts job attempts. Built-in launchers implement it in process;
// external ones are reached through the same interface over gRPC.
type Launcher interface {
	// Name is the launcher's registered name ("local", "slurm", ...).
	Name() string
	// Capabilities reports what this launcher can start.
	Capabilities(ctx context.Context) (Capabilities, error)
	// Start launches the attempt and returns once its processes exist.
	Start(ctx context.Context, spec AttemptSpec) (Handle, error)
}

// RecoverSpec names an attempt to reattach to after a daemon restart.
type RecoverSpec struct {
	// JobID and Attempt identify the attempt, as in its AttemptSpec.
	JobID   string
	Attempt int
	// HandleID is the ID of the attempt's Handle before the restart.
	HandleID string
	// Output receives the workers' output lines from now on; nil discards them.
	Output OutputFunc
}

// Recoverer is implemented by launchers whose attempts outlive the daemon
// that started them (a batch scheduler's jobs): after a restart the daemon
// reattaches to each attempt that was running. A launcher without it, or
// one that answers ErrUnsupported, cannot; an attempt it no longer knows is
// ErrUnknownHandle.
type Recoverer interface {
	Recover(ctx context.Context, spec RecoverSpec) (Handle, error)
}

// Handle is a started attempt.
type Handle interface {
	// ID identifies the attempt to the launcher (for example a process-group id).
	ID() string
	// Wait blocks until every worker process has ended, or ctx is done.
	Wait(ctx context.Context) (Result, error)
	// Signal sends sig to every worker process.
	Signal(ctx context.Context, sig syscall.Signal) error
	// Stop ends the attempt: SIGTERM to every worker, then SIGKILL to whatever
	// is left after grace. It returns when all are gone; calling it twice is safe.
	Stop(ctx context.Context, grace time.Duration) error
}
