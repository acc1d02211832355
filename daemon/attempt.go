package daemon

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// A job runs as a sequence of attempts. An attempt ends when its workers do,
// when the job is stopped, or when the job moves to another configuration:
//
//	running --move--> checkpointing --rank 0 acked, workers exited--> next attempt
//	                       |  (instrumented: control message; else the checkpoint signal)
//	                       +--no ack within the grace--> stop, next attempt from the
//	                                                     last complete checkpoint
//
// A next attempt that cannot start puts the job back on the configuration it
// came from.

// moveReq asks a running job to relaunch at another configuration.
type moveReq struct {
	cfg    plugins.Config
	reason string
	reply  chan error
}

// outcome is how one attempt ended.
type outcome struct {
	res     plugins.Result
	err     error
	stopped bool
	// moved is set when the attempt ended for a move, with where to resume.
	moved     *moveReq
	restore   string
	lastStep  int64
	timing    MoveTiming
	movedAt   time.Time
	viaSignal bool // the move asked with the checkpoint signal, not the control channel
	// detached: the daemon is stopping and leaves the attempt running.
	detached bool
}

// moveLeadSteps is how many steps after the last one seen the workers are
// asked to checkpoint at, at least; moveLeadTime bounds it from below in time
// so that the message reaches every rank first.
const (
	moveLeadSteps = 2
	moveLeadTime  = 300 * time.Millisecond
)

// resumePoint is where a job's next attempt starts.
type resumePoint struct {
	attempt int
	restore string
	step    int64
	// reattach: the attempt is running already (started by the daemon
	// before a restart); recover it instead of starting it.
	reattach bool
}

// run drives one job from the attempt at from to its end.
func (s *supervisor) run(r *running, env []string, from resumePoint) {
	j := r.snapshot()
	log := s.log.With(zap.String("job", j.ID))
	var ctl *controller
	if j.Optimize.Active() {
		var err error
		if ctl, err = s.newController(r); err != nil {
			s.finish(r, nil, 1, fmt.Sprintf("optimizer: %v", err), StateFailed)
			return
		}
	}
	steps, err := s.nc.Subscribe(telemetry.StepSubject(j.ID), func(m *nats.Msg) {
		recs, _ := telemetry.DecodeBatch(m.Data)
		for _, rec := range recs {
			r.sawStep(rec)
			if ctl != nil {
				ctl.offer(rec)
			}
		}
	})
	if err != nil {
		s.finish(r, nil, 1, fmt.Sprintf("follow steps: %v", err), StateFailed)
		return
	}
	defer steps.Unsubscribe()
	preempts, err := s.nc.Subscribe(telemetry.PreemptSubject(j.ID), func(m *nats.Msg) {
		if rec, err := telemetry.DecodeStep(m.Data); err == nil {
			s.preempted(r, rec, log)
		}
	})
	if err != nil {
		s.finish(r, nil, 1, fmt.Sprintf("follow pre-emption notices: %v", err), StateFailed)
		return
	}
	defer preempts.Unsubscribe()
	// The controller must be gone before the job's final record is written.
	stopCtl := func() {}
	if ctl != nil {
		ctx, cancel := context.WithCancel(context.Background())
		go ctl.run(ctx)
		stopCtl = func() { cancel(); ctl.join() }
	}

	outSteps, err := newOutputSteps(j.StepRegex, s.publishStep)
	if err != nil {
		stopCtl()
		s.finish(r, nil, 1, err.Error(), StateFailed)
		return
	}
	cfg := j.Config
	var prev *plugins.Config
	restore, startStep := from.restore, from.step
	hostLosses := 0
	for attempt := max(from.attempt, 1); ; attempt++ {
		spec := plugins.AttemptSpec{
			JobID: j.ID, Attempt: attempt, Command: j.Command, Dir: j.Dir,
			Env: withDefault(withPythonPath(env, s.pyPath), "PYTHONUNBUFFERED", "1"), Config: cfg, Mode: j.Mode,
			Socket: s.socket, CheckpointDir: j.CheckpointDir, Restore: restore, StartStep: startStep,
			Output: s.output(r, attempt, outSteps),
		}
		outSteps.attemptStarted(attempt, cfg)
		var h plugins.Handle
		if from.reattach && attempt == from.attempt {
			var err error
			if h, err = s.reattach(r, spec); err != nil {
				stopCtl()
				s.lost(r, err)
				return
			}
			log.Info("reattached to the attempt after a restart", zap.Int("attempt", attempt), zap.String("handle", h.ID()))
		} else {
			began := time.Now()
			// The attempt lives until it ends or is stopped, not as long as any request.
			var err error
			if h, err = s.launcher.Start(context.Background(), spec); err != nil {
				if prev != nil {
					msg := fmt.Sprintf("attempt %d at %d workers, batch %d could not start (%v); back to %d workers, batch %d",
						attempt, cfg.Workers, cfg.GlobalBatch, err, prev.Workers, prev.GlobalBatch)
					log.Warn("relaunch failed; reverting", zap.Error(err))
					s.event(telemetry.Event{Kind: telemetry.EventMoved, Job: j.ID, Attempt: attempt, Message: msg})
					cfg, prev = *prev, nil
					continue
				}
				log.Warn("start failed", zap.Error(err))
				stopCtl()
				s.finish(r, nil, 127, fmt.Sprintf("start: %v", err), StateFailed)
				return
			}
			r.beginAttempt(attempt, cfg, restore, startStep, h.ID(), time.Now().UTC())
			s.save(context.Background(), r.snapshot())
			s.event(telemetry.Event{Kind: telemetry.EventStarted, Job: j.ID, Attempt: attempt,
				Message: fmt.Sprintf("attempt %d: %d workers, global batch %d (launcher %s, %s)", attempt, cfg.Workers, cfg.GlobalBatch, s.launcher.Name(), h.ID())})
			log.Info("attempt started", zap.Int("attempt", attempt), zap.Int("workers", cfg.Workers), zap.Int("batch", cfg.GlobalBatch), zap.Duration("start", time.Since(began)))
		}

		out := s.watch(r, h, attempt, log)
		telemetry.Drain(s.nc, steps) // the attempt's last steps count in its record
		if out.detached {
			stopCtl()
			s.save(context.Background(), r.snapshot()) // still running: the next daemon reattaches
			log.Info("scavd is stopping; the attempt goes on for the next scavd to reattach to", zap.Int("attempt", attempt), zap.String("handle", h.ID()))
			return
		}
		if out.moved != nil && out.err == nil {
			r.endAttempt(fmt.Sprintf("moved: %s", out.moved.reason), &out.timing)
			s.save(context.Background(), r.snapshot())
			s.event(telemetry.Event{Kind: telemetry.EventMoved, Job: j.ID, Attempt: attempt,
				Message: fmt.Sprintf("moving to %d workers, global batch %d after step %d: %s", out.moved.cfg.Workers, out.moved.cfg.GlobalBatch, out.lastStep, out.moved.reason)})
			c := cfg
			prev = &c
			cfg, restore, startStep = out.moved.cfg, out.restore, out.lastStep
			select {
			case <-r.stop: // stopped between two attempts: keep the checkpoint for --resume
				stopCtl()
				r.update(func(j *Job) { j.Resume = &ResumePoint{Checkpoint: restore, Step: startStep} })
				s.finish(r, nil, 0, fmt.Sprintf("stopped on request between two attempts, at the checkpoint of step %d; continue with: scavctl run --resume %s", startStep, j.ID), StateStopped)
				return
			default:
			}
			continue
		}
		if len(out.res.LostHosts) > 0 && !out.stopped && hostLosses < maxHostLosses {
			if next, ok := s.afterHostLoss(r, cfg, out.res.LostHosts, log); ok {
				hostLosses++
				restore, startStep = s.latestCheckpoint(r)
				from := "the start (no checkpoint was written)"
				if restore != "" {
					from = fmt.Sprintf("the checkpoint of step %d", startStep)
				}
				msg := fmt.Sprintf("lost host %s; relaunching at %d workers, global batch %d from %s",
					strings.Join(out.res.LostHosts, ", "), next.Workers, next.GlobalBatch, from)
				r.endAttempt("failed: lost host "+strings.Join(out.res.LostHosts, ", "), nil)
				s.save(context.Background(), r.snapshot())
				s.event(telemetry.Event{Kind: telemetry.EventMoved, Job: j.ID, Attempt: attempt, Message: msg})
				log.Warn("host lost; relaunching on the others", zap.Strings("lost", out.res.LostHosts), zap.Int("workers", next.Workers))
				cfg, prev = next, nil
				continue
			}
		}
		stopCtl()
		s.conclude(r, out)
		return
	}
}

// maxHostLosses bounds the relaunches after lost hosts in one run of a job,
// so that a flapping network cannot relaunch it forever.
const maxHostLosses = 3

// afterHostLoss is the configuration to go on at after hosts were lost: the
// same, with no more workers than the launcher can still start. ok is false
// when the launcher cannot say or has no room left.
func (s *supervisor) afterHostLoss(r *running, cfg plugins.Config, lost []string, log *zap.Logger) (plugins.Config, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	caps, err := s.launcher.Capabilities(ctx)
	if err != nil {
		log.Warn("hosts lost and the launcher cannot report what is left; the job ends", zap.Strings("lost", lost), zap.Error(err))
		return cfg, false
	}
	next := cfg
	if caps.MaxWorkers > 0 && next.Workers > caps.MaxWorkers {
		next.Workers = caps.MaxWorkers
	}
	if next.Workers < 1 {
		return cfg, false
	}
	if r.snapshot().Optimize.Active() && next.GlobalBatch%next.Workers != 0 {
		next.GlobalBatch -= next.GlobalBatch % next.Workers
	}
	return next, next.GlobalBatch >= next.Workers || next.GlobalBatch == 0
}

// preempted turns a worker's pre-emption notice (its scheduler is about to
// end the allocation) into a move at the same configuration: the workers
// checkpoint, and the next attempt resumes from it. Every rank sends one;
// the first for the current attempt acts.
func (s *supervisor) preempted(r *running, rec telemetry.StepRecord, log *zap.Logger) {
	r.mu.Lock()
	current := rec.Attempt == r.job.Attempt && r.preempted != rec.Attempt && !r.job.State.Done()
	if current {
		r.preempted = rec.Attempt
	}
	cfg, id := r.job.Config, r.job.ID
	r.mu.Unlock()
	if !current {
		return
	}
	reason := fmt.Sprintf("pre-empted: rank %d received %s from the scheduler", rec.Rank, rec.ID)
	log.Info("pre-emption notice; checkpointing and relaunching", zap.Int("attempt", rec.Attempt), zap.Int("rank", rec.Rank), zap.String("signal", rec.ID))
	s.mu.Lock()
	if s.closed { // the stop that follows checkpoints the job anyway
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		if _, err := s.moveJob(context.Background(), id, cfg, reason); err != nil {
			log.Warn("pre-empted job could not checkpoint", zap.Error(err))
		}
	}()
}

// conclude records how the job's last attempt ended as the job's end.
func (s *supervisor) conclude(r *running, out outcome) {
	if out.err != nil {
		r.endAttempt("failed: "+out.err.Error(), nil)
		s.finish(r, nil, 1, fmt.Sprintf("wait: %v", out.err), StateFailed)
		return
	}
	state, msg := StateSucceeded, "all workers exited 0"
	switch {
	case (out.stopped || out.res.Stopped) && out.restore != "":
		state = StateStopped
		msg = fmt.Sprintf("stopped on request after checkpointing step %d; continue with: scavctl run --resume %s", out.lastStep, r.id())
		r.update(func(j *Job) { j.Resume = &ResumePoint{Checkpoint: out.restore, Step: out.lastStep} })
	case out.stopped || out.res.Stopped:
		state, msg = StateStopped, "stopped on request"
	case out.res.ExitCode != 0:
		state = StateFailed
		msg = fmt.Sprintf("rank %d exited with %d; the other workers were stopped", out.res.FailedRank, out.res.ExitCode)
	}
	r.endAttempt(string(state), nil)
	s.finish(r, &out.res, out.res.ExitCode, msg, state)
}

// watch waits for one attempt to end, handling stop and move requests.
func (s *supervisor) watch(r *running, h plugins.Handle, attempt int, log *zap.Logger) outcome {
	type waited struct {
		res plugins.Result
		err error
	}
	r.mu.Lock()
	r.handle = h
	r.mu.Unlock()
	waitCtx, cancelWait := context.WithCancel(context.Background())
	defer cancelWait() // a detached attempt is not waited for
	wc := make(chan waited, 1)
	go func() { // ends when the attempt does (Stop guarantees that) or with waitCtx
		res, err := h.Wait(waitCtx)
		wc <- waited{res, err}
	}()
	var (
		out      outcome
		stops    sync.WaitGroup // Stop calls in flight; a later one may shorten the grace
		acks     chan telemetry.StepRecord
		ackSub   *nats.Subscription
		deadline <-chan time.Time
		acked    time.Time
	)
	defer func() {
		if ackSub != nil {
			ackSub.Unsubscribe()
		}
	}()
	grace := r.snapshot().Grace.D()
	detach := r.detach
	stop := func(g time.Duration) {
		stops.Add(1)
		go func() {
			defer stops.Done()
			if err := h.Stop(context.Background(), g); err != nil {
				log.Warn("stop", zap.Error(err))
			}
		}()
	}
	for {
		select {
		case w := <-wc:
			stops.Wait()
			out.res, out.err = w.res, w.err
			if out.stopped && out.restore == "" && (out.viaSignal || ackSub != nil) {
				out.restore, out.lastStep = s.latestCheckpoint(r)
			}
			if out.moved != nil {
				switch {
				case out.viaSignal || out.timing.Fallback:
					// The script checkpointed by convention, or was stopped:
					// resume from the newest complete checkpoint there is.
					out.restore, out.lastStep = s.latestCheckpoint(r)
					out.timing.Checkpoint = time.Since(out.movedAt).Seconds()
				case out.restore == "":
					// The workers exited without acknowledging a checkpoint (one
					// died writing it?): go on from the last complete one, if any.
					if out.restore, out.lastStep = s.latestCheckpoint(r); out.restore == "" {
						out.moved.fail(fmt.Errorf("the workers exited before checkpointing (exit %d) and left no checkpoint", w.res.ExitCode))
						out.moved = nil
						return out
					}
					log.Warn("the workers exited without acknowledging the checkpoint; going on from the last complete one",
						zap.String("checkpoint", out.restore), zap.Int64("step", out.lastStep), zap.Int("exit_code", w.res.ExitCode))
					out.timing.Fallback = true
				default:
					out.timing.Exit = time.Since(acked).Seconds()
				}
				out.res, out.err = plugins.Result{}, nil
				out.moved.fail(nil)
			}
			return out
		case <-detach:
			detach = nil
			if out.moved == nil && !out.stopped {
				out.detached = true
				return out
			}
			// Mid-move or stopping: the workers are checkpointing and exiting,
			// and a stop finishes that as well as anything.
			r.requestStop(0)
		case g := <-r.stop:
			if out.stopped {
				stop(g) // asked again: a shorter grace kills sooner
				continue
			}
			out.stopped = true
			if out.moved != nil {
				// A checkpoint is already on its way: it serves the stop as well.
				out.moved.fail(fmt.Errorf("the job is stopping"))
				out.moved = nil
			}
			r.update(func(j *Job) { j.State = StateStopping })
			s.save(context.Background(), r.snapshot())
			msg := fmt.Sprintf("SIGTERM to the workers, SIGKILL after %s", g)
			if ackSub == nil {
				viaSignal, err := s.beginCheckpoint(r, h, attempt, &acks, &ackSub)
				if err == nil {
					out.viaSignal = viaSignal
					msg = fmt.Sprintf("asked the workers to checkpoint and exit; SIGKILL after %s", g)
				}
			}
			s.event(telemetry.Event{Kind: telemetry.EventStopping, Job: r.id(), Attempt: attempt, Message: msg})
			if ackSub != nil || out.viaSignal {
				deadline = time.After(g) // the grace is for checkpointing; then kill
			} else {
				stop(g)
			}
		case m := <-r.move:
			if out.moved != nil || out.stopped {
				m.fail(fmt.Errorf("the job is already moving or stopping"))
				continue
			}
			out.moved, out.movedAt = &m, time.Now()
			var err error
			if out.viaSignal, err = s.beginCheckpoint(r, h, attempt, &acks, &ackSub); err != nil {
				m.fail(err)
				out.moved = nil
				continue
			}
			deadline = time.After(grace)
		case a := <-acks:
			if a.Rank == 0 && a.Checkpoint != "" && out.restore == "" {
				acked = time.Now()
				out.restore, out.lastStep = a.Checkpoint, a.Step
				out.timing.Checkpoint = acked.Sub(out.movedAt).Seconds()
			}
		case <-deadline:
			deadline = nil
			if out.stopped {
				log.Warn("workers still running when the grace ended; killing them", zap.Duration("grace", grace))
				stop(time.Millisecond)
				continue
			}
			if out.restore == "" && out.moved != nil {
				log.Warn("no checkpoint acknowledged within the grace; stopping the attempt", zap.Duration("grace", grace))
				out.timing.Fallback = true
				stop(grace)
			}
		}
	}
}

// beginCheckpoint asks the attempt's workers to checkpoint and exit: over the
// control channel when they report steps (viaSignal false), else with the
// job's checkpoint signal.
func (s *supervisor) beginCheckpoint(r *running, h plugins.Handle, attempt int, acks *chan telemetry.StepRecord, sub **nats.Subscription) (viaSignal bool, err error) {
	j := r.snapshot()
	last, stepTime, stepped := r.progress()
	if !stepped {
		if j.CheckpointSignal == "" {
			return false, fmt.Errorf("job %s reports no steps and has no --checkpoint-signal: it cannot be moved without losing work", j.ID)
		}
		sig, err := parseSignal(j.CheckpointSignal)
		if err != nil {
			return false, err
		}
		if err := h.Signal(context.Background(), sig); err != nil {
			return false, fmt.Errorf("send %s to job %s: %w", j.CheckpointSignal, j.ID, err)
		}
		return true, nil
	}
	ch := make(chan telemetry.StepRecord, 64)
	sb, err := s.nc.Subscribe(telemetry.AckSubject(j.ID), func(m *nats.Msg) {
		if a, err := telemetry.DecodeStep(m.Data); err == nil && a.Attempt == attempt {
			select {
			case ch <- a:
			default:
			}
		}
	})
	if err != nil {
		return false, fmt.Errorf("follow acks of %s: %w", j.ID, err)
	}
	*acks, *sub = ch, sb
	lead := int64(moveLeadSteps)
	if stepTime > 0 {
		lead = max(lead, int64(moveLeadTime.Seconds()/stepTime)+1)
	}
	c := telemetry.Control{Kind: telemetry.ControlCheckpoint, ID: fmt.Sprintf("%s-%d-%d", j.ID, attempt, last), Job: j.ID,
		Attempt: attempt, AfterStep: last + lead, Dir: j.CheckpointDir}
	if err := s.pub.Publish(telemetry.ControlSubject(j.ID), c.Encode()); err != nil {
		return false, fmt.Errorf("send checkpoint request to %s: %w", j.ID, err)
	}
	return false, nil
}

// moveJob asks a running job to relaunch at cfg and waits until its workers
// have checkpointed and exited (or the move failed).
func (s *supervisor) moveJob(ctx context.Context, id string, cfg plugins.Config, reason string) (Job, error) {
	s.mu.Lock()
	r, ok := s.jobs[id]
	s.mu.Unlock()
	if !ok {
		return Job{}, fmt.Errorf("move job %s: %w (or it has already ended)", id, ErrNoJob)
	}
	if cfg.LRScale == 0 {
		cfg.LRScale = 1
	}
	spec := plugins.AttemptSpec{JobID: id, Attempt: 1, Command: r.snapshot().Command, Config: cfg}
	if err := spec.Validate(); err != nil {
		return Job{}, fmt.Errorf("%w: move job %s: %w", ErrBadRequest, id, err)
	}
	m := moveReq{cfg: cfg, reason: reason, reply: make(chan error, 1)}
	select {
	case r.move <- m:
	case <-r.done:
		return Job{}, fmt.Errorf("move job %s: %w (it has ended)", id, ErrNoJob)
	case <-ctx.Done():
		return Job{}, ctx.Err()
	}
	select {
	case err := <-m.reply:
		if err != nil {
			return Job{}, fmt.Errorf("move job %s: %w", id, err)
		}
	case <-r.done:
		return Job{}, fmt.Errorf("move job %s: %w (it has ended)", id, ErrNoJob)
	case <-ctx.Done():
		return Job{}, fmt.Errorf("move job %s: %w", id, ctx.Err())
	}
	return r.snapshot(), nil
}

// fail answers the requester of a move (nil: the workers are down and the
// relaunch follows).
func (m *moveReq) fail(err error) {
	select {
	case m.reply <- err:
	default:
	}
}

// latestCheckpoint is the newest complete checkpoint in the job's directory
// (from its manifest) and the step it holds; without a manifest, the
// directory itself when the script left files there (it knows their names),
// at an unknown step (0).
func (s *supervisor) latestCheckpoint(r *running) (string, int64) {
	dir := r.snapshot().CheckpointDir
	if m, err := readManifest(dir); err == nil {
		return m.path, m.step
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return dir, 0
	}
	return "", 0
}
