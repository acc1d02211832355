package jobs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/words"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// One attempt, from the runner's side. It ends when its workers do, when the
// job is stopped, or when the job moves to another configuration:
//
//	running --move--> checkpointing --rank 0 acked, workers exited--> (next attempt)
//	                       |  (instrumented: control message; else the checkpoint signal)
//	                       +--no ack within the grace--> stop; the next attempt starts
//	                                                     from the last complete checkpoint
//
// A move is asked for by a user (Registry.Move), by the job's controller (a
// verdict) or by a pre-emption notice (a move to the same configuration).

// moveLeadSteps is how many steps after the last one seen the workers are
// asked to checkpoint at, at least; moveLeadTime bounds it from below in time
// so that the message reaches every rank first.
const (
	moveLeadSteps = 2
	moveLeadTime  = 300 * time.Millisecond
)

// callTimeout bounds a launcher call that is not a Start or a Stop.
const callTimeout = 30 * time.Second

// outcome is how one attempt ended.
type outcome struct {
	res     plugins.Result
	err     error
	stopped bool
	// moved is set when the attempt ended for a move, with where to resume.
	moved     *moveReq
	restore   string
	lastStep  int64
	timing    api.MoveTiming
	movedAt   time.Time
	viaSignal bool // the move asked with the checkpoint signal, not the control channel
	// detached: the daemon is stopping and leaves the attempt running.
	detached bool
	// acked: the restore point is rank 0's acknowledgement of this
	// attempt's checkpoint; killed: a stop had to kill the workers (asked
	// again, or the grace ran out) before they had checkpointed.
	acked, killed bool
	// stalled: the watchdog stopped the attempt after its ranks reported no
	// step for that long (--on-stall restart); nanStop: a stop for a loss
	// that turned NaN (--on-nan stop). See health.go.
	stalled time.Duration
	nanStop bool
	// limit: the controller stopped the job, a limit of it being reached
	// (why); empty for a stop on request.
	limit string
}

// stopCause says why the attempt was stopped.
func (o outcome) stopCause() string {
	if o.limit != "" {
		return "because " + o.limit
	}
	return "on request"
}

// watch is one attempt's watch: the state the runner keeps while it waits
// for the attempt to end.
type watch struct {
	r     *runner
	h     plugins.Handle
	n     int // the attempt
	grace time.Duration
	kill  context.Context
	out   outcome

	stops     sync.WaitGroup // Stop calls in flight; a later one may shorten the grace
	acks      chan telemetry.StepRecord
	ackSub    *nats.Subscription
	deadline  <-chan time.Time
	acked     time.Time
	preempted bool
}

// waited is what Handle.Wait returned.
type waited struct {
	res plugins.Result
	err error
}

// clean says whether every worker exited 0.
func (r waited) clean() bool { return r.err == nil && r.res.ExitCode == 0 }

// watch waits for attempt n, whose handle is h, to end, handling stop and
// move requests, the controller's verdicts and pre-emption notices.
func (r *runner) watch(kill, shutdown context.Context, h plugins.Handle, n int) outcome {
	w := &watch{r: r, h: h, n: n, grace: r.rec.job.Grace.D(), kill: kill}
	// Waiting ends with the attempt (a kill at the daemon's deadline ends
	// that too), or when a detached attempt is left: not with kill itself.
	waitCtx, cancelWait := context.WithCancel(context.WithoutCancel(kill))
	wc := make(chan waited, 1)
	go func() { // ends when the attempt does (Stop guarantees that) or with waitCtx
		res, err := h.Wait(waitCtx)
		wc <- waited{res, err}
	}()
	defer func() {
		if w.ackSub != nil {
			_ = w.ackSub.Unsubscribe()
		}
		if w.out.detached {
			cancelWait() // a detached attempt is not waited for
			<-wc
		}
		cancelWait()
	}()
	killed, closing := kill.Done(), shutdown.Done()
	var flushed <-chan time.Time // set while output waits for its rate
	health := time.NewTicker(healthEvery)
	defer health.Stop()
	for {
		select {
		case <-health.C:
			w.health()
		case res := <-wc:
			w.stops.Wait()
			r.out.flush(true) // the attempt's output is all in: its last lines are kept
			w.lateAck(res)
			w.ended(res)
			return w.out
		case <-r.out.waiting:
			if flushed == nil {
				flushed = time.After(outputFlushEvery)
			}
		case <-flushed:
			flushed = nil
			if r.out.flush(false) {
				flushed = time.After(outputFlushEvery)
			}
		case <-closing:
			closing = nil // acted on once
			if w.out.moved == nil && !w.out.stopped && r.leave(h) {
				w.out.detached = true
				return w.out
			}
			// Mid-move or stopping: the workers are checkpointing and exiting,
			// and a stop finishes that as well as anything.
			w.stop(w.grace)
		case <-killed:
			killed = nil
			w.kill9()
		case g := <-r.stops:
			w.stop(g)
		case m := <-r.moves:
			if err := w.moveOrPin(m); err != nil {
				m.fail(err)
			}
		case v := <-r.verdicts:
			w.verdict(v)
		case rec := <-r.preempts:
			w.preempt(rec)
		case a := <-w.acks:
			w.ack(a)
		case <-w.deadline:
			w.deadline = nil
			w.graceOver()
		}
	}
}

// leave reports whether a stopping daemon leaves the attempt of h running
// for the next daemon instead of stopping it: a service's (not scavctl's
// own) attempt that outlives it, through a launcher that can reattach to it.
func (r *runner) leave(h plugins.Handle) bool {
	o, ok := h.(interface{ Outlives() bool })
	_, rec := r.g.o.Launcher.(plugins.Recoverer)
	return r.g.o.RestartDir != "" && rec && ok && o.Outlives()
}

// stopAttempt ends the attempt in the background with grace g; the watch
// joins it before it returns.
func (w *watch) stopAttempt(g time.Duration) {
	w.stops.Add(1)
	go func() {
		defer w.stops.Done()
		// The workers must go even when the daemon's time is up: bounded, not cancelled.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(w.kill), g+killTimeout)
		defer cancel()
		if err := w.h.Stop(ctx, g); err != nil {
			w.r.log.Warn("stop", zap.Error(err))
		}
	}()
}

// kill9 ends the attempt now: the daemon's grace is over.
func (w *watch) kill9() {
	w.r.log.Warn("the daemon is out of time; killing the workers", zap.Int("attempt", w.n))
	w.out.stopped = true
	w.out.killed = w.out.killed || w.out.restore == ""
	w.stopAttempt(time.Millisecond)
}

// stop handles a stop request with grace g: the workers checkpoint (when
// they can) and exit within it, or are killed.
func (w *watch) stop(g time.Duration) {
	if w.out.stopped {
		w.out.killed = w.out.killed || w.out.restore == "" && g < w.grace
		w.stopAttempt(g) // asked again: a shorter grace kills sooner
		return
	}
	w.out.stopped = true
	if w.out.moved != nil {
		// A checkpoint is already on its way: it serves the stop as well.
		w.out.moved.fail(fmt.Errorf("the job is stopping"))
		w.out.moved = nil
	}
	w.r.rec.job.State = api.StateStopping
	w.r.save(w.kill)
	msg := fmt.Sprintf("SIGTERM to the workers, SIGKILL after %s", g)
	if w.ackSub == nil {
		if viaSignal, err := w.checkpoint(); err == nil {
			w.out.viaSignal = viaSignal
			msg = fmt.Sprintf("asked the workers to checkpoint and exit; SIGKILL after %s", g)
		}
	}
	w.r.event(telemetry.EventStopping, w.n, msg)
	if w.ackSub != nil || w.out.viaSignal {
		w.deadline = time.After(g) // the grace is for checkpointing; then kill
	} else {
		w.stopAttempt(g)
	}
}

// ack takes a worker's acknowledgement of the checkpoint request.
func (w *watch) ack(a telemetry.StepRecord) {
	if a.Rank == 0 && a.Checkpoint != "" && w.out.restore == "" {
		w.acked = time.Now()
		w.out.restore, w.out.lastStep, w.out.acked = a.Checkpoint, a.Step, true
		w.out.timing.Checkpoint = w.acked.Sub(w.out.movedAt).Seconds()
	}
}

// ackAfterExit is how long a move waits, once the workers have exited, for
// the acknowledgement they sent before: it comes through the telemetry
// socket and NATS, their exit through the launcher, and the exit can be
// seen first. Workers that all exited 0 did as they were asked, and their
// acknowledgement is on its way however busy the socket is (a flood of
// another user's telemetry delayed one by more than a second: the move
// went on from an older checkpoint): it is waited for ackAfterCleanExit.
const (
	ackAfterExit      = time.Second
	ackAfterCleanExit = 5 * time.Second
)

// lateAck takes the acknowledgement of a move's checkpoint that reaches the
// daemon after the workers' exit, waiting up to ackAfterExit for it
// (ackAfterCleanExit when they exited 0).
func (w *watch) lateAck(res waited) {
	if w.out.moved == nil || w.out.restore != "" || w.acks == nil || w.out.viaSignal || w.out.timing.Fallback {
		return
	}
	wait := ackAfterExit
	if res.clean() {
		wait = ackAfterCleanExit
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for w.out.restore == "" {
		select {
		case a := <-w.acks:
			w.ack(a)
		case <-t.C:
			return
		}
	}
}

// graceOver handles the end of the grace of a stop or a move: a stop kills
// what is left; a move that got no acknowledgement falls back to a stop.
func (w *watch) graceOver() {
	if w.out.stopped {
		w.r.log.Warn("workers still running when the grace ended; killing them", zap.Duration("grace", w.grace))
		w.out.killed = w.out.killed || w.out.restore == ""
		w.stopAttempt(time.Millisecond)
		return
	}
	if w.out.restore == "" && w.out.moved != nil {
		w.r.log.Warn("no checkpoint acknowledged within the grace; stopping the attempt", zap.Duration("grace", w.grace))
		w.out.timing.Fallback = true
		w.stopAttempt(w.grace)
	}
}

// ended takes the attempt's end and settles where a move or a stop goes on from.
func (w *watch) ended(res waited) {
	out := &w.out
	out.res, out.err = res.res, res.err
	if out.stopped && out.restore == "" && (out.viaSignal || w.ackSub != nil) {
		out.restore, out.lastStep = w.r.latestCheckpoint()
		if !out.killed {
			out.lastStep = w.stepOf(out.restore, out.lastStep)
		}
	}
	if out.moved == nil {
		return
	}
	switch {
	case out.viaSignal || out.timing.Fallback:
		// The script checkpointed by convention, or was stopped: resume from
		// the newest complete checkpoint there is.
		out.restore, out.lastStep = w.r.latestCheckpoint()
		out.lastStep = w.stepOf(out.restore, out.lastStep)
		out.timing.Checkpoint = time.Since(out.movedAt).Seconds()
	case out.restore == "":
		// The workers exited without acknowledging a checkpoint (one died
		// writing it? its acknowledgement is late?): go on from the last
		// complete one, if any; one the script named itself was written
		// on the request when they all exited 0.
		if out.restore, out.lastStep = w.r.latestCheckpoint(); out.restore == "" {
			out.moved.fail(fmt.Errorf("the workers exited before checkpointing (exit %d) and left no checkpoint", res.res.ExitCode))
			out.moved = nil
			return
		}
		if res.clean() {
			out.lastStep = w.stepOf(out.restore, out.lastStep)
		}
		w.r.log.Warn("the workers exited without acknowledging the checkpoint; going on from the last complete one",
			zap.String("checkpoint", out.restore), zap.Int64("step", out.lastStep), zap.Int("exit_code", res.res.ExitCode))
		out.timing.Fallback = true
	default:
		out.timing.Exit = time.Since(w.acked).Seconds()
	}
	out.res, out.err = plugins.Result{}, nil
	// Recorded before the requester hears: its answer (the record) says
	// whether the move checkpointed or fell back to an older checkpoint.
	w.r.endAttempt(w.kill, fmt.Sprintf("moved: %s", out.moved.reason), &out.timing)
	w.r.save(w.kill)
	out.moved.fail(nil)
}

// checkpoint asks the attempt's workers to checkpoint and exit: over the
// control channel when they report steps (viaSignal false), else with the
// job's checkpoint signal.
func (w *watch) checkpoint() (viaSignal bool, err error) {
	j := &w.r.rec.job
	pr := w.r.prog.now()
	if !pr.Stepped {
		if j.CheckpointSignal == "" {
			return false, fmt.Errorf("job %s reports no steps and has no --checkpoint-signal: it cannot be moved without losing work", j.ID)
		}
		sig, err := api.ParseSignal(j.CheckpointSignal)
		if err != nil {
			return false, err
		}
		ctx, cancel := context.WithTimeout(w.kill, callTimeout)
		defer cancel()
		if err := w.h.Signal(ctx, sig); err != nil {
			return false, fmt.Errorf("send %s to job %s: %w", j.CheckpointSignal, j.ID, err)
		}
		return true, nil
	}
	if w.acks, w.ackSub, err = w.r.g.followAcks(j.ID, w.n); err != nil {
		return false, err
	}
	c := telemetry.Control{Kind: telemetry.ControlCheckpoint, ID: fmt.Sprintf("%s-%d-%d", j.ID, w.n, pr.LastStep), Job: j.ID,
		Attempt: w.n, AfterStep: pr.LastStep + moveLead(pr.StepTime), Dir: j.CheckpointDir}
	if err := w.r.g.o.NC.Publish(telemetry.ControlSubject(j.ID), c.Encode()); err != nil {
		return false, fmt.Errorf("send checkpoint request to %s: %w", j.ID, err)
	}
	return false, nil
}

// moveLead is how many steps past the last one seen a checkpoint request
// names: moveLeadSteps, or moveLeadTime at stepTime seconds a step (0:
// unknown).
func moveLead(stepTime float64) int64 {
	if stepTime <= 0 {
		return moveLeadSteps
	}
	return max(moveLeadSteps, int64(moveLeadTime.Seconds()/stepTime)+1)
}

// followAcks subscribes to the acknowledgements of job's attempt; the
// channel drops what its reader does not take in time.
func (g *Registry) followAcks(job string, attempt int) (chan telemetry.StepRecord, *nats.Subscription, error) {
	ch := make(chan telemetry.StepRecord, 64)
	sub, err := g.o.NC.Subscribe(telemetry.AckSubject(job), func(m *nats.Msg) {
		if a, err := telemetry.DecodeStep(m.Data); err == nil && a.Attempt == attempt {
			select {
			case ch <- a:
			default:
			}
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("follow acks of %s: %w", job, err)
	}
	return ch, sub, nil
}

// stepOf is the step of checkpoint restore, which latestCheckpoint found at
// step, when the workers wrote it on a request to checkpoint and exit: a
// checkpoint the script named itself (no manifest, step 0: unknown) is at
// the last step they reported or printed. Without it the next attempt
// would count the job's steps from 0 again.
func (w *watch) stepOf(restore string, step int64) int64 {
	if restore != "" && step == 0 {
		return w.r.prog.now().LastStep
	}
	return step
}

// latestCheckpoint is the newest complete checkpoint in the job's directory
// (from its manifest) and the step it holds; without a manifest, the
// directory itself when the script left files there (it knows their names),
// at an unknown step (0).
func (r *runner) latestCheckpoint() (string, int64) {
	return latestCheckpoint(r.rec.job)
}

// addDecision records d in j, said in plain English (words.Decision), and
// returns it so. Only the latest candidate set is kept, so
// that a job that decides often does not grow its record without bound.
func addDecision(j *api.Job, d api.Decision) api.Decision {
	d.Words = words.Decision(d, j.ShowsCost())
	if len(d.Candidates) > 0 {
		for i := range j.Decisions {
			j.Decisions[i].Candidates = nil
		}
	}
	j.Decisions = append(j.Decisions, d)
	j.Phase = d.Phase
	return d
}
