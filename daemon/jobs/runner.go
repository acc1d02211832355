package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/control"
	"github.com/scavenger-ml/scavenger/internal/words"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// runner drives one job from its first (or resumed, or reattached) attempt
// to its end. Its goroutine, run, is the only writer of the job's record;
// everyone else talks to it through its channels and reads what it last
// saved.
type runner struct {
	g   *Registry
	log *zap.Logger
	rec record   // run's alone (and launch's, before run starts)
	env []string // the workers' environment
	// owner is the job's owner (nil: the daemon's own); it never changes.
	owner *api.Owner
	from  resumePoint
	prog  progress
	out   *jobOutput // the job's output, capped
	// view is the record as the runner last saved it; cur the attempt and
	// configuration now, for the controller.
	view atomic.Pointer[[]byte]
	cur  atomic.Pointer[current]
	// live is the attempt whose workers' telemetry binds now (nil: none;
	// live.go).
	live atomic.Pointer[LiveAttempt]

	stops    chan time.Duration   // a stop request with its grace; buffered 1
	moves    chan moveReq         // taken while an attempt runs
	verdicts chan control.Verdict // from the controller
	preempts chan telemetry.StepRecord
	done     chan struct{}
	ctl      *control.Controller // the job's controller, when it has one
	// digest takes each step message the runner reads, for the job's step
	// digest (Digests.Follow; nil: none kept).
	digest digestFeed
	// lostHosts is set once an attempt lost a host (run's alone): the
	// workers there may spool records after the job's end (drainLate).
	lostHosts bool
	// earlyExit is the exit code of the last attempt when it crashed
	// before its first step (nil: it did not; restartpolicy.go).
	earlyExit *int
}

// current is the attempt a job runs now and its configuration.
type current struct {
	attempt int
	cfg     plugins.Config
}

// resumePoint is where a job's next attempt starts.
type resumePoint struct {
	attempt int
	restore string
	step    int64
	// reattach: the attempt is running already (started by the daemon
	// before a restart); recover it instead of starting it.
	reattach bool
}

// plan is the next attempt to start: its number, configuration and where
// it starts from; prev is the configuration to go back to should it not
// start (nil: none, the job fails).
type plan struct {
	resumePoint
	cfg  plugins.Config
	prev *plugins.Config
	// note, when set, says why this attempt starts (a restart after a
	// crash); its started event carries it.
	note string
}

// moveReq asks a running job to relaunch at another configuration.
type moveReq struct {
	cfg    plugins.Config
	reason string
	// decided: a decision of the job's policy, whose event said why already.
	decided bool
	// pin, when set, pins the job at cfg or releases it (Registry.Pin).
	pin   *bool
	reply chan error // buffered 1: nil once the workers are down
}

// fail answers the requester of a move (nil: the workers are down and the
// relaunch follows).
func (m *moveReq) fail(err error) {
	select {
	case m.reply <- err:
	default:
	}
}

// ending is how a job's run ends.
type ending struct {
	state  api.JobState
	code   int
	msg    string
	res    *plugins.Result
	resume *api.ResumePoint
	// why ends the last attempt's record when it is still open.
	why string
	// detached: the daemon is stopping and leaves the attempt running for
	// the next daemon to reattach to.
	detached bool
}

// failed is the ending of a job that could not go on.
func failed(code int, msg string) ending {
	return ending{state: api.StateFailed, code: code, msg: msg, why: "failed: " + msg}
}

func newRunner(g *Registry, rec record, env []string, from resumePoint) *runner {
	r := &runner{
		g: g, log: g.log.With(zap.String("job", rec.job.ID)), rec: rec, env: env, from: from,
		stops: make(chan time.Duration, 1), moves: make(chan moveReq), verdicts: make(chan control.Verdict),
		preempts: make(chan telemetry.StepRecord, 16), done: make(chan struct{}),
	}
	if o := rec.job.Owner; o != nil {
		owner := *o
		owner.Groups = slices.Clone(o.Groups)
		r.owner = &owner
	}
	r.out = newJobOutput(rec.job, r.publishLine, r.g.quota)
	if rec.job.Optimize.Active() && rec.job.Phase == "" {
		r.rec.job.Phase = api.PhaseWarmup
	}
	r.cur.Store(&current{attempt: rec.job.Attempt, cfg: rec.job.Config})
	return r
}

// run drives the job until it ends; kill ends the grace of a closing
// daemon, shutdown asks the job to stop (or its attempt to be left running).
func (r *runner) run(kill, shutdown context.Context) {
	defer close(r.done)
	j := r.rec.job
	if j.Optimize.Active() {
		var err error
		if r.ctl, err = r.newController(kill); err != nil {
			r.finish(kill, failed(1, fmt.Sprintf("optimizer: %v", err)))
			return
		}
		r.startWhereTheModelsSay(kill)
	}
	ctl := r.ctl
	unfollow, err := r.follow(ctl)
	if err != nil {
		r.finish(kill, failed(1, err.Error()))
		return
	}
	defer unfollow()
	ctlCtx, stopCtl := context.WithCancel(kill)
	ctlDone := make(chan struct{})
	go func() {
		defer close(ctlDone)
		if ctl != nil {
			ctl.Run(ctlCtx)
		}
	}()
	end := r.attempts(kill, shutdown)
	stopCtl()
	<-ctlDone // the controller is gone before the final record is written
	if end.detached {
		r.save(kill)
		r.log.Info("scavd is stopping; the attempt goes on for the next scavd to reattach to", zap.Int("attempt", r.rec.job.Attempt))
		return
	}
	r.finish(kill, end)
}

// follow subscribes to the job's step records as the store took them (for
// its progress, its controller when it has one, and its step digest) and
// its pre-emption notices.
func (r *runner) follow(ctl *control.Controller) (unfollow func(), err error) {
	id := r.rec.job.ID
	steps, err := r.g.o.NC.Subscribe(telemetry.StoredStepSubject(id), func(m *nats.Msg) {
		recs, bad := r.decode(m)
		for _, rec := range recs {
			r.prog.saw(rec)
		}
		if ctl != nil {
			ctl.Steps(recs)
		}
		if seq, last, ok := history.StoredAt(m); ok && r.digest != nil {
			r.digest(seq, last, recs, bad)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("follow steps: %w", err)
	}
	preempts, err := r.g.o.NC.Subscribe(telemetry.PreemptSubject(id), func(m *nats.Msg) {
		if rec, err := telemetry.DecodeStep(m.Data); err == nil {
			select {
			case r.preempts <- rec:
			default: // one notice is enough
			}
		}
	})
	if err != nil {
		_ = steps.Unsubscribe()
		return nil, fmt.Errorf("follow pre-emption notices: %w", err)
	}
	return func() {
		_ = steps.Unsubscribe()
		_ = preempts.Unsubscribe()
	}, nil
}

// decode is a stored step message's records and the number of its lines
// that do not decode: the telemetry socket's, when it published it and
// still has them, else decoded here.
func (r *runner) decode(m *nats.Msg) ([]telemetry.StepRecord, int) {
	if r.g.o.Decoded != nil {
		if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
			if recs, ok := r.g.o.Decoded(id); ok {
				return recs, 0
			}
		}
	}
	return telemetry.DecodeBatch(m.Data)
}

// attempts runs the job's attempts, one after the other, until one ends it.
func (r *runner) attempts(kill, shutdown context.Context) ending {
	j := r.rec.job
	outSteps, err := newOutputSteps(j.StepRegex, r.publishStep)
	if err != nil {
		return failed(1, err.Error())
	}
	p := plan{resumePoint: r.from, cfg: j.Config}
	p.attempt = max(p.attempt, 1)
	r.g.drainSpool(kill, r.rec.job, !p.reattach) // what the workers of an attempt before a restart left
	hostLosses := 0
	for {
		h, end, ok := r.begin(kill, &p, outSteps)
		if !ok {
			return end
		}
		out := r.watch(kill, shutdown, h, p.attempt)
		if end, done := r.after(kill, shutdown, out, &p, &hostLosses); done {
			return end
		}
		p.attempt++
	}
}

// begin starts the attempt p names (or reattaches to it); a relaunch that
// cannot start goes back to the configuration it came from.
func (r *runner) begin(ctx context.Context, p *plan, out *outputSteps) (plugins.Handle, ending, bool) {
	for ; ; p.attempt++ {
		r.openLive(p)
		spec := r.spec(p, out)
		out.attemptStarted(p.attempt, p.cfg, p.step)
		if p.reattach {
			p.reattach = false
			h, err := r.reattach(ctx, spec)
			if err != nil {
				return nil, r.lost(ctx, err), false
			}
			r.log.Info("reattached to the attempt after a restart", zap.Int("attempt", p.attempt), zap.String("handle", h.ID()))
			return h, ending{}, true
		}
		began := time.Now()
		h, err := r.g.o.Launcher.Start(ctx, spec)
		if err == nil {
			r.beginAttempt(ctx, p, h.ID())
			r.log.Info("attempt started", zap.Int("attempt", p.attempt), zap.Int("workers", p.cfg.Workers), zap.Int("batch", p.cfg.GlobalBatch), zap.Duration("start", time.Since(began)))
			return h, ending{}, true
		}
		if p.prev == nil {
			r.log.Warn("start failed", zap.Error(err))
			// The job's last attempt is the one that failed to start: its
			// final event carries that number, which a follower (scavctl
			// run) waits for.
			r.rec.job.Attempt = p.attempt
			return nil, ending{state: api.StateFailed, code: 127, msg: fmt.Sprintf("start: %v", err)}, false
		}
		r.log.Warn("relaunch failed; reverting", zap.Error(err))
		r.event(telemetry.EventMoved, p.attempt, fmt.Sprintf("attempt %d at %s could not start (%v); back to %s",
			p.attempt, words.Config(p.cfg), err, words.Config(*p.prev)))
		p.cfg, p.prev = *p.prev, nil
	}
}

// spec is the launcher's specification of the attempt p names.
func (r *runner) spec(p *plan, out *outputSteps) plugins.AttemptSpec {
	j := &r.rec.job
	spec := plugins.AttemptSpec{
		JobID: j.ID, Attempt: p.attempt, Command: j.Command, Dir: j.Dir,
		Env: workerEnv(r.env, r.g.o.PythonPath, j.Optimize), Config: p.cfg, Mode: j.Mode,
		Socket: r.g.o.Socket, CheckpointDir: j.CheckpointDir, Restore: p.restore, StartStep: p.step,
		Output: r.output(p.attempt, out), User: runAs(j.Owner),
	}
	if r.g.o.Token != nil {
		spec.Token = r.g.o.Token(j.ID, p.attempt)
	}
	return spec
}

// beginAttempt records a started attempt; the one before it, if it ended
// for a move, gets the start part of that move's timing.
func (r *runner) beginAttempt(ctx context.Context, p *plan, handle string) {
	now := time.Now().UTC()
	j := &r.rec.job
	if k := len(j.Attempts); k > 0 {
		if prev := &j.Attempts[k-1]; prev.Move != nil && prev.Ended != nil {
			prev.Move.Start = now.Sub(*prev.Ended).Seconds()
		}
	}
	j.Attempts = append(j.Attempts, api.Attempt{Attempt: p.attempt, Config: p.cfg, Started: now, Restore: p.restore, Handle: handle})
	j.State, j.Attempt, j.Config, j.Stalled = api.StateRunning, p.attempt, p.cfg, nil
	if j.Started == nil {
		j.Started = &now
	}
	r.prog.begin(p.attempt, p.step, 0, 0)
	r.cur.Store(&current{attempt: p.attempt, cfg: p.cfg})
	r.save(ctx)
	r.observeMarket(ctx)
	note := ""
	if p.note != "" {
		note = " after a crash (" + p.note + ")"
		p.note = ""
	}
	r.event(telemetry.EventStarted, p.attempt, fmt.Sprintf("attempt %d%s: %s (launcher %s, %s)",
		p.attempt, note, words.Config(p.cfg), r.g.o.Launcher.Name(), handle))
}

// endAttempt closes the current attempt's record and reads its machines'
// charges (the job goes on).
func (r *runner) endAttempt(ctx context.Context, why string, move *api.MoveTiming) {
	if r.closeAttempt(why, move) {
		r.recordCost(ctx) // cost.go
	}
}

// closeAttempt closes the current attempt's record; false when none was open.
func (r *runner) closeAttempt(why string, move *api.MoveTiming) bool {
	k := len(r.rec.job.Attempts)
	if k == 0 || r.rec.job.Attempts[k-1].Ended != nil {
		return false
	}
	now := time.Now().UTC()
	a := &r.rec.job.Attempts[k-1]
	a.Ended, a.EndReason, a.Move = &now, why, move
	r.live.Store(nil) // its workers are gone: their token binds nothing more
	return true
}

// finish records the end of the job and publishes its final event.
func (r *runner) finish(ctx context.Context, e ending) {
	g := r.g
	handover := e.state == api.StateStopped && g.o.ResumeJobs && g.o.RestartDir != "" && g.shuttingDown()
	switch {
	case handover:
		e.msg += handoverNote + ": the next scavd on this node resumes it (scavctl attach " + r.rec.job.ID + " follows it)"
	case e.resume != nil:
		e.msg += "; continue with: scavctl run --resume " + r.rec.job.ID
	}
	if !handover {
		g.forgetEnv(r.rec.job.ID)
	}
	if e.state == api.StateSucceeded {
		g.dropOwnersEnv(r.rec.job.ID)
	}
	why := e.why
	if why == "" {
		why = string(e.state)
	}
	r.closeAttempt(why, nil)
	if st := r.out.stats(); st.Bytes > 0 {
		g.quota.ended(r.rec.job.Owner, r.rec.job.ID, st.Bytes)
	}
	r.settleCost(ctx) // cost.go: the job's machines end with it, and their charges are read once
	now := time.Now().UTC()
	j := &r.rec.job
	j.State, j.Ended, j.ExitCode, j.Result, j.Message = e.state, &now, &e.code, e.res, e.msg
	if e.resume != nil {
		j.Resume = e.resume
	}
	// The end must be stored, or a follower waits for it forever: while the
	// store cannot write (a full state disk) it is tried again until it can.
	_ = keepTrying(ctx, r.log, "record the end of the job", func() error { return r.store(ctx) })
	g.removeEmptyCheckpointDir(*j)
	fin := telemetry.Event{Kind: telemetry.EventFinished, Job: j.ID, Attempt: j.Attempt, ExitCode: &e.code, Message: e.msg,
		State: string(e.state), Handover: handover, Time: now}
	_ = keepTrying(ctx, r.log, "publish the end of the job", func() error { return r.publishStored(ctx, fin) })
	r.log.Info("job finished", zap.String("state", string(e.state)), zap.Int("exit_code", e.code))
}

// save folds the progress into the record and writes it; a failure is
// logged (the job goes on) and returned.
func (r *runner) save(ctx context.Context) error {
	err := r.store(ctx)
	if err != nil {
		r.log.Error("save job record", zap.Error(err))
	}
	return err
}

// store folds the progress and the output counts into the record and writes it.
func (r *runner) store(ctx context.Context) error {
	r.prog.fold(&r.rec.job)
	if st := r.out.stats(); st.Lines > 0 {
		r.rec.job.Output = &st
	}
	b, err := r.rec.commit(context.WithoutCancel(ctx))
	if b != nil {
		r.view.Store(&b)
	}
	return err
}

// snapshot is the job's record as the runner last saved it.
func (r *runner) snapshot() api.Job {
	var j api.Job
	if b := r.view.Load(); b != nil {
		_ = json.Unmarshal(*b, &j)
	}
	return j
}

// Current is the attempt the job runs now and its configuration.
func (r *runner) Current() (int, plugins.Config) {
	c := r.cur.Load()
	return c.attempt, c.cfg
}

// LastStep is the newest step the job's rank 0 completed.
func (r *runner) LastStep() int64 { return r.prog.now().LastStep }

// SetNoise records the controller's latest gradient noise scale estimate.
func (r *runner) SetNoise(noise float64) { r.prog.setNoise(noise) }
