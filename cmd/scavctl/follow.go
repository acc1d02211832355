package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/words"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// watchOptions say how watchJob treats its job.
type watchOptions struct {
	// tick is the interval of plain status lines when stderr is no terminal.
	tick time.Duration
	// stop: a signal stops the job (run); else it only detaches (attach).
	stop  bool
	grace time.Duration
}

// watchJob prints the job's output and events from attempt first on, with a
// status line, until it ends; it returns the job's end as run's exit status
// (see run's help). sigs stop the job, or with o.stop unset detach from it.
func (a *app) watchJob(ctx context.Context, c *api.Client, job api.Job, first int, o watchOptions, sigs <-chan os.Signal) error {
	con := newConsole(a.stdout, a.stderr, o.tick)
	defer con.close()
	if a.logOut != nil {
		defer a.logOut.through(con)()
	}
	con.notef("job %s: %s, checkpoints in %s", job.ID, words.Config(job.Config), job.CheckpointDir)
	st := newStepStatus(job.Config, job.ShowsCost())
	feed, err := c.FollowSteps(job.ID, func(r telemetry.StepRecord) {
		st.observe(r)
		con.setStatus(st.line())
	})
	if err != nil {
		return err
	}
	defer feed.Close()
	watchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var interrupted <-chan os.Signal
	var gaveUp atomic.Bool // stopped, and its end never came
	if o.stop {
		interrupted = forwardSignals(watchCtx, c, job.ID, o.grace, sigs, con, func() { gaveUp.Store(true); cancel() })
	} else {
		interrupted = detachOnSignal(watchCtx, cancel, sigs)
	}
	final, err := followJob(watchCtx, c, job.ID, first, con, st)
	cancel()
	sig := <-interrupted
	switch {
	case gaveUp.Load():
		con.notef("scavd did not report the end of job %s within %s of the stop; it may be stopping still: scavctl status %[1]s tells", job.ID, o.grace+stopEndWait)
		code := 143
		if s, ok := sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		return exitError{code: code}
	case errors.Is(err, errDaemonLost):
		con.notef("lost the connection to scavd (%s) for %s; job %s goes on if its launcher keeps it without scavd (jobs submitted to Slurm do, and a restarted scavd reattaches to them): follow it with scavctl attach %[3]s",
			c.URL(), daemonLostAfter, job.ID)
		return exitError{code: exitDaemonLost}
	case !o.stop && sig != nil:
		con.notef("detached from job %s, which goes on: scavctl attach %[1]s follows it again", job.ID)
		return nil
	case err != nil:
		return err
	}
	feed.Drain()
	con.setStatus(st.line())
	return finished(con, job.ID, final, st, sig)
}

// finished says how the job ended and returns it as the exit status.
func finished(con *console, id string, final *telemetry.Event, st *stepStatus, sig os.Signal) error {
	code := 0
	if final.ExitCode != nil {
		code = *final.ExitCode
	}
	con.notef("job %s finished: %s (exit %d); %s", id, final.Message, code, st.summary())
	if sig, ok := sig.(syscall.Signal); ok && (code == 0 || final.State == string(api.StateStopped)) {
		code = 128 + int(sig) // the shell's convention for a command ended by a signal
	}
	if code != 0 {
		return exitError{code: code}
	}
	return nil
}

// detachOnSignal ends the watch at the first signal, leaving the job alone;
// the channel then gives that signal (nil: none came).
func detachOnSignal(ctx context.Context, cancel context.CancelFunc, sigs <-chan os.Signal) <-chan os.Signal {
	out := make(chan os.Signal, 1)
	go func() { // owned by the caller: it ends with ctx, and the caller reads out
		select {
		case <-ctx.Done():
			out <- nil
		case s := <-sigs:
			cancel()
			out <- s
		}
	}()
	return out
}

// stopEndWait is how long after a stop's grace run waits for the job's end
// before it gives up on it (a daemon that cannot record it).
const stopEndWait = time.Minute

// forwardSignals stops the job at the first signal (with grace) and kills it
// at the second, until ctx ends; giveUp is called when the job's end has not
// come stopEndWait after the grace. The channel then gives the first
// signal (nil: none came).
func forwardSignals(ctx context.Context, c *api.Client, id string, grace time.Duration, sigs <-chan os.Signal, con *console, giveUp func()) <-chan os.Signal {
	out := make(chan os.Signal, 1)
	go func() { // owned by the caller: it ends with ctx, and the caller reads out
		var first os.Signal
		var deadline <-chan time.Time
		defer func() { out <- first }()
		for {
			select {
			case <-ctx.Done():
				return
			case <-deadline:
				giveUp()
				return
			case s := <-sigs:
				g := grace
				if first == nil {
					first = s
					deadline = time.After(grace + stopEndWait)
					con.notef("%s: stopping job %s (SIGTERM to workers, SIGKILL after %s; press Ctrl-C again to kill now)", s, id, grace)
				} else {
					g = time.Millisecond
					con.notef("%s: killing job %s now", s, id)
				}
				if _, err := c.Stop(ctx, id, g); err != nil && ctx.Err() == nil {
					con.notef("stop %s: %v", id, err)
				}
			}
		}
	}()
	return out
}

// errDaemonLost says that the daemon was gone for daemonLostAfter.
var errDaemonLost = errors.New("lost the daemon")

// followJob prints the job's output and events from attempt first on until
// its final event, which it returns; errDaemonLost when the daemon goes away.
func followJob(ctx context.Context, c *api.Client, id string, first int, con *console, st *stepStatus) (*telemetry.Event, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lost atomic.Bool // the daemon went away; set before ctx is cancelled
	watched := make(chan struct{})
	go func() { // joined below; ends with ctx
		defer close(watched)
		watchDaemon(ctx, c, daemonLostAfter, func() { lost.Store(true); cancel() })
	}()
	var final *telemetry.Event
	err := c.Output(ctx, id, true, func(l *telemetry.LogLine, e *telemetry.Event) error {
		if l != nil && l.Attempt < first || e != nil && e.Attempt < first && e.Kind != telemetry.EventSubmitted {
			return nil // the output of a run before this one (--resume)
		}
		if l != nil {
			con.workerLine(l.Rank, l.Stream == string(plugins.Stderr), l.Line)
			return nil
		}
		if e.Kind == telemetry.EventFinished {
			if end, err := jobEnds(ctx, c, e); err != nil || !end {
				con.notef("%s", e.Message) // an end the job went on from: a later attempt follows
				return err
			}
			final = e
			return errFinished
		}
		switch e.Kind {
		case telemetry.EventDecided:
			var ds []api.Decision
			if j, err := c.Job(ctx, id); err == nil {
				ds = j.Decisions // with the forecast's steps and intervals
			}
			st.plan(e.Phase, ds)
			con.notef("%s: %s", e.Phase, e.Message)
		case telemetry.EventStopping, telemetry.EventMoved, telemetry.EventRestarting:
			con.notef("%s", e.Message)
		case telemetry.EventStalled, telemetry.EventBadLoss:
			st.flag(e.Kind, e.Message)
			con.notef("%s", e.Message)
		case telemetry.EventStarted:
			if e.Attempt > 1 {
				con.notef("%s", e.Message)
			}
		}
		return nil
	})
	cancel()
	<-watched
	switch {
	case lost.Load():
		return nil, errDaemonLost
	case !errors.Is(err, errFinished):
		return nil, fmt.Errorf("follow output of %s: %w", id, err)
	}
	return final, nil
}

// jobEnds reports whether e, a finished event, is the job's final end, or
// one it goes on from: a scavd that stopped to restart hands the job to the
// next one (which resumes it or says it ended), and a job stopped and then
// resumed (scavctl run --resume) has a later attempt, or runs, by the time
// its record is read. A follower that replays the job's history, or lives
// through such an end, so goes on to the end of the job's last attempt.
func jobEnds(ctx context.Context, c *api.Client, e *telemetry.Event) (bool, error) {
	if e.Handover {
		return false, nil
	}
	j, err := c.Job(ctx, e.Job)
	if err != nil {
		return false, fmt.Errorf("read job %s at the end of attempt %d: %w", e.Job, e.Attempt, err)
	}
	return j.State.Done() && j.Attempt <= e.Attempt, nil
}

// daemonLostAfter is how long scavctl run waits for a lost daemon to come
// back before it stops following the job; exitDaemonLost is its exit status
// then (EX_TEMPFAIL: the job may well go on).
const (
	daemonLostAfter = 15 * time.Second
	exitDaemonLost  = 75
)

// connection is what watchDaemon needs of a client.
type connection interface{ Connected() bool }

// watchDaemon calls lost once nc has not been connected for after (a
// reconnect within it, as to a scavd restarted on the same address, is
// fine), and returns; or returns when ctx ends.
func watchDaemon(ctx context.Context, nc connection, after time.Duration, lost func()) {
	tick := time.NewTicker(after / 30)
	defer tick.Stop()
	var since time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			switch {
			case nc.Connected():
				since = time.Time{}
			case since.IsZero():
				since = now
			case now.Sub(since) >= after:
				lost()
				return
			}
		}
	}
}
