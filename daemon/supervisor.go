package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// supervisor owns the jobs this daemon runs: it starts their attempts through
// the launcher, forwards their output, keeps their records and stops them.
type supervisor struct {
	log      *zap.Logger
	launcher plugins.Launcher
	pub      Publisher
	nc       *nats.Conn // subscriptions: the jobs' steps and acks
	kv       jetstream.KeyValue
	node     string
	socket   string
	ckptRoot string
	pyPath   string
	// allocs ties jobs to the scheduler allocation they run in.
	allocs *allocations
	// restartDir, unless empty (a standalone daemon), keeps running jobs'
	// environments so that the next daemon can reattach to them or resume
	// them (restart.go); resumeJobs makes it resume them.
	restartDir string
	resumeJobs bool

	mu     sync.Mutex
	jobs   map[string]*running
	closed bool
	wg     sync.WaitGroup
}

// running is a job this daemon supervises right now.
type running struct {
	mu   sync.Mutex
	job  Job
	stop chan time.Duration // a stop request with its grace; buffered 1
	move chan moveReq       // a move request; taken by the attempt's watcher
	done chan struct{}
	// detach, closed by a stopping daemon, leaves an attempt that outlives
	// it running for the next daemon to reattach to.
	detach     chan struct{}
	detachOnce sync.Once
	handle     plugins.Handle // the current attempt's

	// Step tracking of the current attempt, from its step records.
	lastStep int64
	lastTime float64
	stepTime float64 // smoothed seconds per step
	stepped  bool    // the attempt's workers have reported a step themselves
	// synth numbers the steps read off the output of an uninstrumented job.
	synth int64
	// preempted is the last attempt whose pre-emption notice was acted on.
	preempted int
	// noiseScale is the gradient noise scale its controller last estimated (0: none).
	noiseScale float64
}

const defaultGrace = 10 * time.Second

// submit validates req, records the job and starts its first attempt.
func (s *supervisor) submit(ctx context.Context, req RunRequest) (Job, error) {
	if err := req.Validate(); err != nil {
		return Job{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	name := req.Name
	if name == "" {
		name = defaultName(req.Command)
	}
	grace := req.Grace
	if grace == 0 {
		grace = Duration(defaultGrace)
	}
	mode := req.Mode
	if mode == "" {
		mode = plugins.ModeAuto
	}
	cfg := req.Config
	if cfg.LRScale == 0 {
		cfg.LRScale = 1
	}
	id := newJobID(name)
	ckpt := req.CheckpointDir
	if ckpt == "" {
		ckpt = filepath.Join(s.ckptRoot, id)
	}
	if err := os.MkdirAll(ckpt, 0o700); err != nil {
		return Job{}, fmt.Errorf("%w: create checkpoint directory %s: %w", ErrBadRequest, ckpt, err)
	}
	j := Job{
		ID: id, Name: name, Command: req.Command, Dir: req.Dir, Config: cfg, Mode: mode,
		CheckpointDir: ckpt, Grace: grace, CheckpointSignal: req.CheckpointSignal, StepRegex: req.StepRegex, Node: s.node, Launcher: s.launcher.Name(),
		Optimize: req.Optimize, Allocation: req.Allocation,
		State: StateStarting, Created: time.Now().UTC(),
	}
	if req.Allocation != "" {
		if err := s.allocs.attach(ctx, req.Allocation, id); err != nil {
			s.log.Warn("tie job to its allocation", zap.String("job", id), zap.String("allocation", req.Allocation), zap.Error(err))
		}
	}
	msg := fmt.Sprintf("%d workers, global batch %d", cfg.Workers, cfg.GlobalBatch)
	if err := s.launch(ctx, j, req.Env, resumePoint{attempt: 1}, msg); err != nil {
		return Job{}, err
	}
	return j, nil
}

// resume continues a stopped job from its checkpoint as a new attempt.
func (s *supervisor) resume(ctx context.Context, id string, env []string) (Job, error) {
	j, err := getJob(ctx, s.kv, id)
	if err != nil {
		return Job{}, err
	}
	s.mu.Lock()
	_, busy := s.jobs[id]
	s.mu.Unlock()
	switch {
	case busy || !j.State.Done():
		return Job{}, fmt.Errorf("%w: job %s is %s, not stopped", ErrBadRequest, id, j.State)
	case j.State == StateSucceeded:
		return Job{}, fmt.Errorf("%w: job %s has finished; there is nothing to resume", ErrBadRequest, id)
	}
	from := resumePoint{attempt: j.Attempt + 1}
	if j.Resume != nil {
		from.restore, from.step = j.Resume.Checkpoint, j.Resume.Step
	} else if m, err := readManifest(j.CheckpointDir); err == nil {
		from.restore, from.step = m.path, m.step
	} else {
		return Job{}, fmt.Errorf("%w: job %s left no checkpoint in %s to resume from", ErrBadRequest, id, j.CheckpointDir)
	}
	j.State, j.Ended, j.ExitCode, j.Result, j.Message, j.Resume = StateStarting, nil, nil, nil, "", nil
	if err := s.launch(ctx, j, env, from, fmt.Sprintf("resuming from step %d (%s)", from.step, from.restore)); err != nil {
		return Job{}, err
	}
	return j, nil
}

// launch records the job and runs it from from in its own goroutine, owned
// by the supervisor (joined by close).
func (s *supervisor) launch(ctx context.Context, j Job, env []string, from resumePoint, msg string) error {
	r := &running{job: j, stop: make(chan time.Duration, 1), move: make(chan moveReq), done: make(chan struct{}), detach: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("daemon is shutting down")
	}
	s.jobs[j.ID] = r
	s.wg.Add(1)
	s.mu.Unlock()
	s.save(ctx, j)
	s.rememberEnv(j.ID, env)
	s.event(telemetry.Event{Kind: telemetry.EventSubmitted, Job: j.ID, Attempt: from.attempt, Message: msg})
	go func() {
		defer s.wg.Done()
		defer close(r.done)
		s.run(r, withTarget(env, j.Optimize), from)
	}()
	return nil
}

// withTarget adds the job's target to the workers' environment.
func withTarget(env []string, o Optimize) []string {
	if o.TargetSamples <= 0 {
		return env
	}
	return append(env[:len(env):len(env)], fmt.Sprintf("SCAV_TARGET_SAMPLES=%d", o.TargetSamples))
}

// finish records the end of a job and publishes its final event.
func (s *supervisor) finish(r *running, res *plugins.Result, code int, msg string, state JobState) {
	now := time.Now().UTC()
	if state == StateStopped && s.resumeJobs && s.restartDir != "" && s.shuttingDown() {
		msg += "; scavd was stopping: the next scavd on this node resumes it"
	} else {
		s.forgetEnv(r.id())
	}
	r.update(func(j *Job) {
		j.State, j.Ended, j.ExitCode, j.Result, j.Message = state, &now, &code, res, msg
	})
	j := r.snapshot()
	s.save(context.Background(), j)
	s.event(telemetry.Event{Kind: telemetry.EventFinished, Job: j.ID, Attempt: j.Attempt, ExitCode: &code, Message: msg})
	s.log.Info("job finished", zap.String("job", j.ID), zap.String("state", string(state)), zap.Int("exit_code", code))
	s.mu.Lock()
	delete(s.jobs, j.ID)
	s.mu.Unlock()
}

// stopJob asks a running job to stop; grace 0 uses the job's own. Asking
// again with a shorter grace brings the SIGKILL forward.
func (s *supervisor) stopJob(id string, grace time.Duration) (Job, error) {
	s.mu.Lock()
	r, ok := s.jobs[id]
	s.mu.Unlock()
	if !ok {
		return Job{}, fmt.Errorf("stop job %s: %w (or it has already ended)", id, ErrNoJob)
	}
	r.requestStop(grace)
	return r.snapshot(), nil
}

// close stops every job with its own grace and waits for all to end.
func (s *supervisor) close() {
	s.mu.Lock()
	s.closed = true
	rs := make([]*running, 0, len(s.jobs))
	for _, r := range s.jobs {
		rs = append(rs, r)
	}
	s.mu.Unlock()
	for _, r := range rs {
		if s.leave(r) {
			r.detachOnce.Do(func() { close(r.detach) })
		} else {
			r.requestStop(0)
		}
	}
	s.wg.Wait()
}

// outliver is a handle whose attempt outlives the daemon (a submitted
// batch job), so that the next daemon can reattach to it.
type outliver interface{ Outlives() bool }

// leave reports whether a stopping daemon leaves r's attempt running for
// the next daemon instead of stopping it: a service's (not scavctl's own)
// attempt that outlives it, through a launcher that can reattach to it.
func (s *supervisor) leave(r *running) bool {
	r.mu.Lock()
	h := r.handle
	r.mu.Unlock()
	o, ok := h.(outliver)
	_, rec := s.launcher.(plugins.Recoverer)
	return s.restartDir != "" && rec && ok && o.Outlives()
}

// active lists the ids of the jobs still running here.
func (s *supervisor) active() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.jobs))
	for id := range s.jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// output publishes each worker line on the job's log subject.
// output publishes each worker line on the job's log subject and lets steps
// read the job's progress off it.
func (s *supervisor) output(r *running, attempt int, steps *outputSteps) plugins.OutputFunc {
	job := r.id()
	subj := telemetry.LogSubject(job)
	log := s.log.With(zap.String("job", job))
	return func(rank int, stream plugins.Stream, line string) {
		b, _ := json.Marshal(telemetry.LogLine{Attempt: attempt, Rank: rank, Stream: string(stream), Line: line, Time: time.Now().UTC()})
		if err := s.pub.Publish(subj, b); err != nil {
			log.Debug("publish output", zap.Error(err))
		}
		steps.line(r, rank, stream, line, log)
	}
}

// publishStep publishes a step record the daemon made itself.
func (s *supervisor) publishStep(rec telemetry.StepRecord) error {
	b, _ := json.Marshal(rec)
	return s.pub.Publish(telemetry.StepSubject(rec.Job), append(b, '\n'))
}

func (s *supervisor) event(e telemetry.Event) {
	e.Time = time.Now().UTC()
	b, _ := json.Marshal(e)
	if err := s.pub.Publish(telemetry.EventSubject(e.Job), b); err != nil {
		s.log.Warn("publish event", zap.String("job", e.Job), zap.String("kind", string(e.Kind)), zap.Error(err))
	}
}

// save writes the job record; a failure is logged, the job goes on.
func (s *supervisor) save(ctx context.Context, j Job) {
	b, _ := json.Marshal(j)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.kv.Put(ctx, j.ID, b); err != nil {
		s.log.Warn("save job record", zap.String("job", j.ID), zap.Error(err))
	}
}

func (r *running) snapshot() Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.job
}

func (r *running) update(f func(*Job)) {
	r.mu.Lock()
	f(&r.job)
	r.mu.Unlock()
}

func (r *running) id() string { return r.snapshot().ID }

// claimSteps takes n step numbers for steps read off the output and returns
// the first, or 0 once the workers report steps themselves.
func (r *running) claimSteps(n int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stepped {
		return 0
	}
	r.synth = max(r.synth, r.lastStep)
	first := r.synth + 1
	r.synth += n
	return first
}

// beginAttempt records a new attempt; the one before it, if it ended for a
// move, gets the start part of that move's timing.
func (r *running) beginAttempt(n int, cfg plugins.Config, restore string, startStep int64, handle string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := len(r.job.Attempts); k > 0 {
		if p := &r.job.Attempts[k-1]; p.Move != nil && p.Ended != nil {
			p.Move.Start = now.Sub(*p.Ended).Seconds()
		}
	}
	r.job.Attempts = append(r.job.Attempts, Attempt{Attempt: n, Config: cfg, Started: now, Restore: restore, Handle: handle})
	r.job.State, r.job.Attempt, r.job.Config = StateRunning, n, cfg
	if r.job.Started == nil {
		r.job.Started = &now
	}
	r.lastStep, r.lastTime, r.stepTime, r.stepped = startStep, 0, 0, false
}

// endAttempt closes the current attempt's record.
func (r *running) endAttempt(reason string, move *MoveTiming) {
	now := time.Now().UTC()
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := len(r.job.Attempts); k > 0 {
		a := &r.job.Attempts[k-1]
		a.Ended, a.EndReason, a.Move = &now, reason, move
	}
}

// sawStep follows the current attempt's progress from its step records.
func (r *running) sawStep(rec telemetry.StepRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := len(r.job.Attempts)
	if k == 0 || rec.Attempt != r.job.Attempt {
		return
	}
	a := &r.job.Attempts[k-1]
	if a.FirstStep == 0 || rec.Step < a.FirstStep {
		a.FirstStep = rec.Step
		if k > 1 {
			if p := &r.job.Attempts[k-2]; p.Move != nil && p.Move.FirstStep == 0 {
				p.Move.FirstStep = time.Since(a.Started).Seconds()
			}
		}
	}
	if rec.Step > a.LastStep {
		a.LastStep = rec.Step
	}
	if rec.From == "" {
		r.stepped = true
	}
	if rec.Rank == 0 && rec.Step > r.lastStep {
		if r.lastTime > 0 && rec.Step == r.lastStep+1 && rec.Time > r.lastTime {
			dt := rec.Time - r.lastTime
			if r.stepTime == 0 {
				r.stepTime = dt
			} else {
				r.stepTime = 0.8*r.stepTime + 0.2*dt
			}
		}
		r.lastStep, r.lastTime = rec.Step, rec.Time
	}
}

// progress returns the last step rank 0 completed, the smoothed step time
// (0 when unknown) and whether this attempt has reported any step.
func (r *running) progress() (last int64, stepTime float64, stepped bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastStep, r.stepTime, r.stepped
}

// decided records a decision of the job's policy.
func (r *running) decided(d Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(d.Candidates) > 0 {
		// Only the latest candidate set is kept, so that a job that decides
		// often does not grow its record without bound.
		for i := range r.job.Decisions {
			r.job.Decisions[i].Candidates = nil
		}
	}
	r.job.Decisions = append(r.job.Decisions, d)
	r.job.Phase = d.Phase
}

func (r *running) requestStop(grace time.Duration) {
	if grace <= 0 {
		grace = r.snapshot().Grace.D()
	}
	select {
	case r.stop <- grace:
	default: // a stop is already waiting to be taken
	}
}

// withDefault sets key=value in env unless env sets key already. Workers'
// python output is unbuffered by default, so that their lines (and progress)
// arrive as they are written.
func withDefault(env []string, key, value string) []string {
	for _, kv := range env {
		if len(kv) > len(key) && kv[:len(key)] == key && kv[len(key)] == '=' {
			return env
		}
	}
	return append(env[:len(env):len(env)], key+"="+value)
}

// withPythonPath puts dir first on PYTHONPATH in env, so that the workers
// import the scavenger client this binary carries.
func withPythonPath(env []string, dir string) []string {
	if dir == "" {
		return env
	}
	out := make([]string, 0, len(env)+1)
	val := dir
	for _, kv := range env {
		if len(kv) > 11 && kv[:11] == "PYTHONPATH=" {
			if rest := kv[11:]; rest != "" {
				val = dir + string(os.PathListSeparator) + rest
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "PYTHONPATH="+val)
}
