// Package supervisor runs a started attempt to its end for the launchers
// (local, ssh, slurm): it owns the one loop they share. The loop records
// how each rank ended, makes the first rank that fails on its own the
// attempt's failure (plugins.Result.FailedRank, its exit code, 128+n for
// signal n) and stops the others; it escalates a stop from SIGTERM to
// SIGKILL when the grace is over, a later Stop with a shorter grace
// bringing the SIGKILL forward; it refuses signals once a stop has begun or
// the ranks have ended, and joins the signals in flight before cleaning up;
// and it publishes the plugins.Result that Wait returns to every caller.
//
// A Supervisor is the common half of a launcher's plugins.Handle (Wait,
// Signal, Stop; the launcher adds ID). The launcher supplies what differs
// as a Ranks — how its ranks are signalled, stopped and cleaned up after —
// and the events that tell how they end: RunRanks waits for each rank on a
// goroutine of its own (processes, SSH sessions); Run takes a launcher's
// own events (srun's output, a batch job's state) and hands each to the
// launcher's handler, which reports ends to the Tally.
//
// # Lifecycle
//
//	New ──► Run: running ──┬─ the events end (every rank ended, or srun/the job did) ─┐
//	                       ├─ a rank fails on its own ──► stopping (Config.Grace) ───┤
//	                       └─ Stop(ctx, grace) ─────────► stopping (earliest grace) ──┤
//	                                                                                   ▼
//	   stopping: Escalate(SIGTERM) at once, Escalate(SIGKILL)      finished: Signal refused,
//	   when the deadline passes; Signal refused with ErrStopped    Signals in flight joined,
//	                                                               Ranks.Finish, Result published
//
// A rank that ends while a stop is under way, or after another rank
// failed, is Stopped; one whose host was lost is not: it fails, and is the
// attempt's failure if none came first. A rank whose end was never
// reported counts as stopped by SIGKILL when the attempt was stopping, and
// takes End.Unreported otherwise.
package supervisor

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/plugins"
)

// Ranks is what a launcher supplies to its Supervisor: how the attempt's
// ranks are reached. Escalate and Finish are called from Run's goroutine,
// Deliver from Signal's callers.
type Ranks interface {
	// String names the attempt in errors ("job j attempt 2").
	String() string
	// Deliver sends sig to the ranks still running, for Handle.Signal.
	Deliver(ctx context.Context, sig syscall.Signal) error
	// Escalate stops the ranks: Run calls it with SIGTERM when a stop
	// begins and with SIGKILL when its grace is over. It logs its own failures.
	Escalate(ctx context.Context, sig syscall.Signal)
	// Finish is called once, after the last event and after every Deliver
	// call has returned: it cleans up (what the ranks left behind, output
	// readers, connections) and says what Run cannot know. ranks holds each
	// rank's end as reported; Finish may correct their exit codes and signals.
	Finish(ctx context.Context, ranks []plugins.RankResult) End
}

// End is what a launcher's Finish adds to the Result.
type End struct {
	// Unreported is the end of each rank whose end was never reported,
	// when the attempt was not stopping (its exit code and signal).
	Unreported plugins.RankResult
	// LostHosts becomes Result.LostHosts.
	LostHosts []string
	// Err, when set, is returned by Wait beside the Result (the attempt was
	// lost); Wait names the attempt.
	Err error
}

// Exit is how one rank ended.
type Exit struct {
	// Rank is the rank that ended.
	Rank int
	// Result is its end; Rank and Stopped are filled in by the Tally.
	Result plugins.RankResult
	// Lost is why the rank's host was lost; nil when the rank ended by
	// itself. A rank whose host was lost fails, even during a stop.
	Lost error
}

func (e Exit) failed() bool { return e.Lost != nil || e.Result.ExitCode != 0 }

// Config configures a Supervisor.
type Config struct {
	// N is the number of ranks of the attempt.
	N int
	// Grace is how long the peers of a failed rank get between SIGTERM and SIGKILL.
	Grace time.Duration
	// LeavePeers leaves the peers of a failed rank to the launcher's own
	// mechanism (srun --kill-on-bad-exit in a batch job) instead of stopping
	// them; they still count as stopped when they end.
	LeavePeers bool
	// Logger is the attempt's logger.
	Logger *zap.Logger
}

// Supervisor is the part of a plugins.Handle that every launcher shares:
// Wait, Signal and Stop, over the loop that Run or RunRanks runs. Make it
// with New; a launcher embeds it in its handle.
type Supervisor struct {
	cfg    Config
	ranks  Ranks
	logger *zap.Logger
	stops  *stopRequests // Stop calls, for Run
	done   chan struct{} // closed when the Result is published

	mu       sync.Mutex
	stopping bool // a stop has begun: Signal is refused
	finished bool // the events are all in: Signal is refused
	// signals counts the Deliver calls in flight; Finish waits for them.
	signals sync.WaitGroup
	result  plugins.Result
	err     error
}

// New returns the Supervisor of an attempt whose ranks are reached through
// ranks. Run or RunRanks must then be called once.
func New(cfg Config, ranks Ranks) *Supervisor {
	return &Supervisor{cfg: cfg, ranks: ranks, logger: cfg.Logger, stops: newStopRequests(), done: make(chan struct{})}
}

// Done is closed once the Result is published.
func (s *Supervisor) Done() <-chan struct{} { return s.done }

// Wait blocks until the attempt has finished and returns its Result; every
// call gets the same Result, and the error of End.Err when the launcher
// reported one. It returns ctx's error if ctx ends first.
func (s *Supervisor) Wait(ctx context.Context) (plugins.Result, error) {
	select {
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		r := s.result
		r.Ranks = slices.Clone(r.Ranks)
		r.LostHosts = slices.Clone(r.LostHosts)
		return r, s.err
	case <-ctx.Done():
		return plugins.Result{}, fmt.Errorf("wait for %s: %w", s.ranks, ctx.Err())
	}
}

// Signal delivers sig to the ranks still running. It fails with
// plugins.ErrStopped once the attempt is being stopped and with
// plugins.ErrFinished once its ranks have ended.
func (s *Supervisor) Signal(ctx context.Context, sig syscall.Signal) error {
	s.mu.Lock()
	var err error
	switch {
	case s.finished:
		err = plugins.ErrFinished
	case s.stopping:
		err = plugins.ErrStopped
	default:
		s.signals.Add(1)
	}
	s.mu.Unlock()
	if err == nil {
		defer s.signals.Done()
		err = s.ranks.Deliver(ctx, sig)
	}
	if err != nil {
		return fmt.Errorf("signal %s to %s: %w", unix.SignalName(sig), s.ranks, err)
	}
	return nil
}

// Stop sends SIGTERM to the ranks, SIGKILL when grace has passed (at once
// for grace <= 0), and returns when the attempt has ended. A later call
// with a shorter grace brings the SIGKILL forward. If ctx ends first Stop
// returns its error and the stop goes on. Stopping a finished attempt does
// nothing; its Result keeps Stopped false.
func (s *Supervisor) Stop(ctx context.Context, grace time.Duration) error {
	if err := s.stops.stop(ctx, grace, s.done); err != nil {
		return fmt.Errorf("stop %s: %w", s.ranks, err)
	}
	return nil
}
