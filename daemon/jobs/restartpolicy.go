package jobs

import (
	"fmt"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/scavenger-ml/scavenger/plugins"
)

// The restart policy: what becomes of an attempt that ended with a failed
// worker. Pure: plain values in, a verdict with its reason out.

// Back-off between the restarts of a crashed job: the first restart is at
// once (the worker is gone, its peers stopped); each later one waits twice
// as long as the one before, from firstRestartBackoff up to maxRestartBackoff.
const (
	firstRestartBackoff = time.Second
	maxRestartBackoff   = 30 * time.Second
)

// crash is what the runner knows of an attempt that has ended.
type crash struct {
	// Result is how the attempt ended.
	Result plugins.Result
	// Stopped: the job was being stopped; Moving: the attempt ended for a
	// move; Closing: the daemon is shutting down.
	Stopped, Moving, Closing bool
	// Restarts is how many times the job has restarted after a crash;
	// MaxRestarts how many it may at least.
	Restarts, MaxRestarts int
	// Window is the least total back-off before a crash loop is declared:
	// past MaxRestarts the job goes on restarting while its back-off so far
	// is shorter (0: none), so that a fault that lasts a while (a full disk,
	// a network down) is outlasted.
	Window time.Duration
	// Early: the attempt ended before its first step (soon after it
	// started); PrevEarly is the exit code of the attempt before it when
	// that one ended early too (nil: it did not).
	Early     bool
	PrevEarly *int
	// OOM lists the ranks the kernel's out-of-memory killer killed.
	OOM []int
	// Stalled, when positive, is how long the attempt's ranks had reported
	// no step when the watchdog stopped it (--on-stall restart): a crash.
	Stalled time.Duration
}

// Exit codes of a command that could not be run (the shell's convention,
// which exec-style launchers follow): found but not executable, not found.
const (
	exitCannotExecute = 126
	exitNotFound      = 127
)

// restartVerdict says whether a crashed attempt restarts, after how long,
// and why (or why not).
type restartVerdict struct {
	Restart bool
	Delay   time.Duration
	// Crashed is set when the attempt crashed, restarted or not; Reason
	// says how it crashed and what follows.
	Crashed bool
	Reason  string
}

// restartAfter decides what follows an attempt's end: an attempt that
// crashed on its own (a worker exited non-zero or was killed, with no stop,
// move or lost host behind it, and the daemon not closing) restarts from
// the last complete checkpoint after a back-off that doubles with each
// restart: at least MaxRestarts times, and then while the back-off so far
// is shorter than Window; a crash past that is a crash loop and ends the
// job. A command that cannot be run (exit 126 or 127), or one that crashed
// before its first step twice with the same exit code, is not restarted:
// waiting does not change it.
func restartAfter(c crash) restartVerdict {
	res := c.Result
	if c.Stalled > 0 && !c.Stopped && !c.Closing {
		return loopOr(c, fmt.Sprintf("its ranks reported no step for %s (stalled)", c.Stalled.Round(time.Second)))
	}
	if res.ExitCode == 0 || c.Stopped || res.Stopped || c.Moving || c.Closing || len(res.LostHosts) > 0 {
		return restartVerdict{}
	}
	how := fmt.Sprintf("rank %d exited with %d", res.FailedRank, res.ExitCode)
	switch res.ExitCode {
	case exitNotFound:
		how += " (command not found)"
	case exitCannotExecute:
		how += " (command not executable)"
	}
	for _, r := range res.Ranks {
		if r.Rank == res.FailedRank && r.Signal != "" {
			how = fmt.Sprintf("rank %d was killed by %s", res.FailedRank, r.Signal)
			if slices.Contains(c.OOM, r.Rank) {
				how = fmt.Sprintf("rank %d was killed by the kernel's out-of-memory killer (%s): give it more memory, or a smaller batch", res.FailedRank, r.Signal)
			}
		}
	}
	switch {
	case c.MaxRestarts == 0:
	case res.ExitCode == exitNotFound || res.ExitCode == exitCannotExecute:
		return restartVerdict{Crashed: true, Reason: how + "; not restarted: a command that cannot be run fails the same way each time"}
	case c.Early && c.PrevEarly != nil && *c.PrevEarly == res.ExitCode:
		return restartVerdict{Crashed: true, Reason: fmt.Sprintf("%s; not restarted: it crashed before its first step twice, with exit %d both times, which no restart fixes (scavctl logs shows why)", how, res.ExitCode)}
	}
	return loopOr(c, how)
}

// loopOr is the verdict on a crash described by how that no rule keeps
// from restarting: a restart after the back-off, or past the restarts and
// the window, a crash loop.
func loopOr(c crash, how string) restartVerdict {
	if c.MaxRestarts == 0 {
		return restartVerdict{Crashed: true, Reason: how + "; no restarts allowed (--max-restarts 0)"}
	}
	delay := restartDelay(c.Restarts)
	if c.Restarts >= c.MaxRestarts && (c.Window <= 0 || backedOff(c.Restarts) >= c.Window) {
		reason := fmt.Sprintf("%s; crash loop: it crashed %d times and was restarted %d times", how, c.Restarts+1, c.Restarts)
		if c.Window > 0 && c.Restarts > c.MaxRestarts {
			reason += fmt.Sprintf(" over %s of back-off (at least --max-restarts %d, and until --restart-window %s)", backedOff(c.Restarts).Round(time.Second), c.MaxRestarts, c.Window)
		} else {
			reason += ", the most --max-restarts allows"
		}
		return restartVerdict{Crashed: true, Reason: reason}
	}
	n := fmt.Sprintf("restart %d of %d", c.Restarts+1, c.MaxRestarts)
	if c.Restarts >= c.MaxRestarts {
		n = fmt.Sprintf("restart %d (past --max-restarts %d while the back-off is under %s)", c.Restarts+1, c.MaxRestarts, c.Window)
	}
	return restartVerdict{Restart: true, Crashed: true, Delay: delay, Reason: how + "; " + n}
}

// restartDelay is the back-off before the restart that follows restarts
// earlier ones: none before the first, then firstRestartBackoff doubling
// up to maxRestartBackoff.
func restartDelay(restarts int) time.Duration {
	b := &backoff.ExponentialBackOff{InitialInterval: firstRestartBackoff, Multiplier: 2, MaxInterval: maxRestartBackoff}
	delay := time.Duration(0)
	for range restarts {
		delay = b.NextBackOff()
	}
	return delay
}

// backedOff is the back-off of a job's first restarts restarts, in all.
func backedOff(restarts int) time.Duration {
	var sum time.Duration
	for k := range restarts {
		sum += restartDelay(k)
	}
	return sum
}
