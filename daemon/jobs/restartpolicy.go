package jobs

import (
	"fmt"
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
	// MaxRestarts how many it may.
	Restarts, MaxRestarts int
}

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
// the last complete checkpoint while the job has restarts left, after a
// back-off that doubles with each restart; a crash past the last restart is
// a crash loop and ends the job.
func restartAfter(c crash) restartVerdict {
	res := c.Result
	if res.ExitCode == 0 || c.Stopped || res.Stopped || c.Moving || c.Closing || len(res.LostHosts) > 0 {
		return restartVerdict{}
	}
	how := fmt.Sprintf("rank %d exited with %d", res.FailedRank, res.ExitCode)
	for _, r := range res.Ranks {
		if r.Rank == res.FailedRank && r.Signal != "" {
			how = fmt.Sprintf("rank %d was killed by %s", res.FailedRank, r.Signal)
		}
	}
	if c.Restarts >= c.MaxRestarts {
		if c.MaxRestarts == 0 {
			return restartVerdict{Crashed: true, Reason: how + "; no restarts allowed (--max-restarts 0)"}
		}
		return restartVerdict{Crashed: true, Reason: fmt.Sprintf("%s; crash loop: it crashed %d times and was restarted %d times, the most --max-restarts allows",
			how, c.Restarts+1, c.MaxRestarts)}
	}
	return restartVerdict{Restart: true, Crashed: true, Delay: restartDelay(c.Restarts),
		Reason: fmt.Sprintf("%s; restart %d of %d", how, c.Restarts+1, c.MaxRestarts)}
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
