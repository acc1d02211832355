package jobs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/control"
	"github.com/scavenger-ml/scavenger/internal/words"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// defaultGrace is a job's grace unless it names one.
const defaultGrace = 10 * time.Second

// killTimeout bounds the wait for the workers once the grace of a closing
// registry is over and they are being killed.
const killTimeout = 30 * time.Second

// Attacher ties a job to the scheduler allocation it runs in.
type Attacher interface {
	Attach(ctx context.Context, allocation, job string, owner api.Owner) error
}

// Index is what the registry needs of the job index (jobindex.Index):
// the runners write their jobs' summaries to it, recovery reads the
// unfinished jobs off it, retention the finished ones.
type Index interface {
	Put(ctx context.Context, s api.JobSummary) error
	List(req api.JobsRequest, who api.Owner) (api.JobPage, error)
	Unfinished(node string) []api.JobSummary
	Ended(node string) (ended []api.JobSummary, all int)
	Delete(ctx context.Context, id string) error
}

// Digests is what the registry needs of the jobs' step digests
// (aggregates.Store): one follows a running job's step records, which its
// runner hands it as it reads them (stored); retention deletes a job's.
type Digests interface {
	Follow(ctx context.Context, j api.Job) (stored digestFeed, stop func())
	Delete(ctx context.Context, id string) error
}

// digestFeed takes a job's step message the runner read, stored at stream
// sequence seq after the job's message at last: its records and the number
// of its lines that did not decode.
type digestFeed = func(seq, last uint64, recs []telemetry.StepRecord, bad int)

// Options configure a Registry.
type Options struct {
	Log      *zap.Logger
	Launcher plugins.Launcher
	// NC carries the jobs' events and control messages and their step,
	// acknowledgement and pre-emption subjects; KV is the job bucket.
	NC *nats.Conn
	KV jetstream.KeyValue
	// Decoded, when set, has the records of a step message the telemetry
	// socket published, by the message's id (ingest.Server.Decoded): the
	// runner takes them instead of decoding the stored message again.
	Decoded func(id string) ([]telemetry.StepRecord, bool)
	// Index is the job index; Digests, when set, keeps the jobs' step digests.
	Index   Index
	Digests Digests
	// Node names this node; Socket is the telemetry socket the workers get.
	Node, Socket string
	// CheckpointRoot holds the checkpoints of jobs that name no directory.
	CheckpointRoot string
	// PythonPath is the directory of the python client the workers import.
	PythonPath string
	// Allocations, when set, ties jobs to their scheduler allocation.
	Allocations Attacher
	// RestartDir, unless empty (a standalone daemon), keeps running jobs'
	// environments so that the next daemon can reattach to them or resume
	// them (restart.go); ResumeJobs makes it resume them.
	RestartDir string
	ResumeJobs bool
	// OutputPerUser bounds one user's output in the history, in bytes
	// (outputquota.go; 0: DefaultOutputPerUser, negative: no bound).
	OutputPerUser int64
	// OutputReadPerUser bounds how fast one user's jobs' output is read, in
	// bytes a second (outputquota.go; 0: DefaultOutputReadRate, negative: no
	// bound).
	OutputReadPerUser int64
	// EnvDir, unless empty, keeps the environment each job last ran with,
	// for a resume by someone who is not its owner (Resume).
	EnvDir string
	// Token, when set, is the token of a job's attempt that binds its
	// workers' telemetry to it (AttemptSpec.Token).
	Token func(job string, attempt int) string
	// Progress, when set, counts the workers of a job connected to this
	// node's telemetry socket and says the furthest step they reached
	// (ingest.Server.Progress): after a restart, the leftover workers of a
	// lost job are asked to checkpoint first, all at one step past it.
	Progress func(job string) (workers int, step int64)
	// Models, when set, is the model store the jobs' controllers start from
	// and save to (daemon/models).
	Models control.Models
}

// Registry owns the jobs of this node: it takes submissions, resumptions,
// stops and moves, and runs one runner per running job. A runner is the only
// writer of its job's record.
type Registry struct {
	o   Options
	log *zap.Logger
	js  jetstream.JetStream // events that must be stored (a job's end)
	// shutdown, when cancelled, asks every runner to stop its job (or to
	// leave an attempt that outlives the daemon); kill ends the grace.
	shutdown, kill             context.Context
	cancelShutdown, cancelKill context.CancelFunc

	// quota bounds each user's output in the history.
	quota *outputQuota

	mu     sync.Mutex
	jobs   map[string]*runner
	closed bool
	wg     sync.WaitGroup
	// unreadable names the records Recover found in the bucket but could
	// not read.
	unreadable atomic.Pointer[[]string]
}

// New makes a registry whose runners live, at the longest, as long as ctx
// (the daemon's root context).
func New(ctx context.Context, o Options) *Registry {
	g := &Registry{o: o, log: o.Log, jobs: map[string]*runner{}}
	if o.OutputPerUser == 0 {
		o.OutputPerUser = DefaultOutputPerUser
	}
	if o.OutputReadPerUser == 0 {
		o.OutputReadPerUser = DefaultOutputReadRate
	}
	g.quota = &outputQuota{g: g, limit: o.OutputPerUser, read: rate.Limit(max(o.OutputReadPerUser, 0)), users: map[uint32]*userOutput{}}
	g.js, _ = jetstream.New(o.NC) // fails only without a connection
	g.shutdown, g.cancelShutdown = context.WithCancel(ctx)
	g.kill, g.cancelKill = context.WithCancel(ctx)
	return g
}

// Submit validates req, records the job as owner's and starts its first
// attempt, which runs as owner.
func (g *Registry) Submit(ctx context.Context, req api.RunRequest, owner api.Owner) (api.Job, error) {
	if req.Dir == "" {
		return api.Job{}, fmt.Errorf("%w: the request has no working directory (dir): give the absolute directory the workers run in (scavctl and the python client send the current one)", api.ErrBadRequest)
	}
	if err := control.Check(req); err != nil {
		return api.Job{}, fmt.Errorf("%w: %w", api.ErrBadRequest, err)
	}
	if err := g.checkCapacity(ctx, req); err != nil {
		return api.Job{}, fmt.Errorf("%w: %w", api.ErrBadRequest, err)
	}
	if err := g.checkOwner(ctx, &owner); err != nil {
		return api.Job{}, err
	}
	j := g.newJob(req)
	j.Owner = &owner
	if err := g.checkpointDir(j, req.CheckpointDir != ""); err != nil {
		return api.Job{}, err
	}
	if req.Allocation != "" && g.o.Allocations != nil {
		if err := g.o.Allocations.Attach(ctx, req.Allocation, j.ID, owner); errors.Is(err, api.ErrBadRequest) {
			return api.Job{}, err
		} else if err != nil {
			g.log.Warn("tie job to its allocation", zap.String("job", j.ID), zap.String("allocation", req.Allocation), zap.Error(err))
		}
	}
	rec := record{kv: g.o.KV, idx: g.o.Index, job: j}
	msg := words.Config(j.Config)
	if err := g.launch(ctx, rec, req.Env, resumePoint{attempt: 1}, msg); err != nil {
		return api.Job{}, err
	}
	return j, nil
}

// newJob is the record of a job submitted with req, its defaults filled in.
func (g *Registry) newJob(req api.RunRequest) api.Job {
	name := req.Name
	if name == "" {
		name = defaultName(req.Command)
	}
	grace := req.Grace
	if grace == 0 {
		grace = api.Duration(defaultGrace)
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
		ckpt = filepath.Join(g.o.CheckpointRoot, id)
	}
	restarts := api.DefaultMaxRestarts
	if req.MaxRestarts != nil {
		restarts = *req.MaxRestarts
	}
	return api.Job{
		ID: id, Name: name, Command: req.Command, Dir: req.Dir, Config: cfg, Mode: mode, MaxRestarts: restarts,
		CheckpointDir: ckpt, Grace: grace, CheckpointSignal: req.CheckpointSignal, StepRegex: req.StepRegex,
		Node: g.o.Node, Launcher: g.o.Launcher.Name(), Optimize: req.Optimize.Fixed(cfg.GlobalBatch), Allocation: req.Allocation, Faults: req.Faults,
		State: api.StateStarting, Created: time.Now().UTC(),
	}
}

// Resume continues a stopped job from its checkpoint as a new attempt, for
// by: the job's owner resumes it with env (theirs); anyone else (root) with
// the environment the owner's job last ran with (kept), or, when none was
// kept, the owner's plain one (ownerEnv) — never with their own.
func (g *Registry) Resume(ctx context.Context, id string, env []string, by api.Owner) (api.Job, error) {
	j, err := g.Get(ctx, id)
	if err != nil {
		return api.Job{}, err
	}
	if o := j.Owner; o != nil && o.UID != by.UID {
		env = ownerEnv(*o)
		if kept, ok := g.ownersEnv(id); ok {
			env = kept
		}
	}
	return g.resume(ctx, id, env)
}

// resume continues a stopped job from its checkpoint as a new attempt,
// with env.
func (g *Registry) resume(ctx context.Context, id string, env []string) (api.Job, error) {
	rec, err := g.load(ctx, id)
	if err != nil {
		return api.Job{}, err
	}
	j := rec.job
	switch {
	case g.running(id) != nil || !j.State.Done():
		return api.Job{}, fmt.Errorf("%w: job %s is %s, not stopped", api.ErrBadRequest, id, j.State)
	case j.State == api.StateSucceeded:
		return api.Job{}, fmt.Errorf("%w: job %s has finished; there is nothing to resume", api.ErrBadRequest, id)
	}
	env = plugins.InheritEnv(env) // the launcher sets the worker contract's variables
	if err := refreshOwner(&rec.job); err != nil {
		return api.Job{}, err
	}
	from := resumePoint{attempt: j.Attempt + 1}
	if j.Resume != nil {
		from.restore, from.step = j.Resume.Checkpoint, j.Resume.Step
	} else if m, err := readManifest(j); err == nil {
		from.restore, from.step = m.path, m.step
	} else {
		return api.Job{}, fmt.Errorf("%w: job %s left no checkpoint in %s to resume from", api.ErrBadRequest, id, j.CheckpointDir)
	}
	rec.job.State, rec.job.Ended, rec.job.ExitCode, rec.job.Result, rec.job.Message, rec.job.Resume = api.StateStarting, nil, nil, nil, "", nil
	rec.job.Restarts = 0 // a resumed job has its restarts again
	if err := g.launch(ctx, rec, env, from, fmt.Sprintf("resuming from step %d (%s)", from.step, from.restore)); err != nil {
		return api.Job{}, err
	}
	return rec.job, nil
}

// launch writes the job's record and starts its runner, which owns it from
// then on (joined by Close).
func (g *Registry) launch(ctx context.Context, rec record, env []string, from resumePoint, msg string) error {
	id := rec.job.ID
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return errors.New("daemon is shutting down")
	}
	if _, busy := g.jobs[id]; busy {
		g.mu.Unlock()
		return fmt.Errorf("%w: job %s is running already", api.ErrBadRequest, id)
	}
	r := newRunner(g, rec, env, from)
	g.jobs[id] = r
	g.wg.Add(1)
	g.mu.Unlock()
	if err := r.save(ctx); err != nil {
		g.mu.Lock()
		delete(g.jobs, id)
		g.mu.Unlock()
		g.wg.Done()
		return err
	}
	g.rememberEnv(id, env)
	r.event(telemetry.EventSubmitted, from.attempt, msg)
	stopDigest := func() {}
	if g.o.Digests != nil {
		r.digest, stopDigest = g.o.Digests.Follow(g.kill, rec.job)
	}
	go func() {
		defer g.wg.Done()
		r.run(g.kill, g.shutdown)
		stopDigest() // folds what the job's last records left, and saves
		g.mu.Lock()
		delete(g.jobs, id)
		g.mu.Unlock()
		if r.lostHosts {
			g.drainLate(r.rec.job)
		}
	}()
	return nil
}

// running returns the runner of job id, or nil when it does not run here.
func (g *Registry) running(id string) *runner {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.jobs[id]
}

// Get reads one job's record.
func (g *Registry) Get(ctx context.Context, id string) (api.Job, error) {
	rec, err := load(ctx, g.o.KV, id)
	return rec.job, err
}

// List reads the record of every job in the index, oldest first: a read
// per job (a listing that needs no more than summaries reads the index).
func (g *Registry) List(ctx context.Context) ([]api.Job, error) {
	p, err := g.o.Index.List(api.JobsRequest{All: true}, api.Owner{User: "root"})
	if err != nil {
		return nil, err
	}
	out := make([]api.Job, 0, len(p.Jobs))
	for _, s := range p.Jobs {
		if j, err := g.Get(ctx, s.ID); err == nil { // else removed since
			out = append(out, j)
		}
	}
	return out, nil
}

// Active lists the ids of the jobs running here.
func (g *Registry) Active() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	ids := make([]string, 0, len(g.jobs))
	for id := range g.jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// RunningOwner says whether job id runs here and who owns it (nil: the
// daemon's own user), without reading its record: the node sampler asks it
// for every process it finds every tick. The owner is shared: read it only.
func (g *Registry) RunningOwner(id string) (*api.Owner, bool) {
	r := g.running(id)
	if r == nil {
		return nil, false
	}
	return r.owner, true
}

// Status is a running job as its runner last recorded it, with its progress.
type Status struct {
	Job      api.Job
	Progress Progress
}

// Running returns the status of every job running here.
func (g *Registry) Running() []Status {
	g.mu.Lock()
	rs := make([]*runner, 0, len(g.jobs))
	for _, r := range g.jobs {
		rs = append(rs, r)
	}
	g.mu.Unlock()
	out := make([]Status, 0, len(rs))
	for _, r := range rs {
		out = append(out, Status{Job: r.snapshot(), Progress: r.prog.now()})
	}
	return out
}

// Close stops every job: each checkpoints and stops within its grace (or,
// in a service, an attempt that outlives the daemon is left running for the
// next one). Once the longest grace is over, or ctx is done, what is left is
// killed; Close returns when every runner has ended, or killTimeout later.
func (g *Registry) Close(ctx context.Context) {
	g.mu.Lock()
	g.closed = true
	grace := time.Duration(0)
	for _, r := range g.jobs {
		grace = max(grace, r.snapshot().Grace.D())
	}
	g.mu.Unlock()
	idle := make(chan struct{})
	go func() {
		defer close(idle)
		g.wg.Wait()
	}()
	g.cancelShutdown()
	t := time.NewTimer(grace + killTimeout)
	defer t.Stop()
	select {
	case <-idle:
		g.cancelKill()
		return
	case <-ctx.Done():
	case <-t.C:
	}
	g.log.Warn("jobs still running after their grace; killing them", zap.Strings("jobs", g.Active()))
	g.cancelKill()
	select {
	case <-idle:
	case <-time.After(killTimeout):
		g.log.Error("jobs did not end after being killed; leaving them", zap.Strings("jobs", g.Active()))
	}
}

// Unreadable names the job records that Recover found in the bucket but
// could not read (a damaged store).
func (g *Registry) Unreadable() []string {
	if p := g.unreadable.Load(); p != nil {
		return *p
	}
	return nil
}

// shuttingDown reports whether Close has begun.
func (g *Registry) shuttingDown() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}
