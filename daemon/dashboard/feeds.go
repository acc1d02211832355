package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/report"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// The pages of one job share a feed of its step records and output, read
// through the API as the job's owner (who may always read it) once a
// viewer has been let in by the API as themselves; the jobs pages share
// one feed of every job's live steps, read as the daemon's user, from
// which each viewer gets the figures of the jobs the API lists for them.
// A feed starts with its first viewer and stops feedLinger after its last
// (a reload finds it warm).

// Bounds of the feeds.
const (
	feedLinger = 30 * time.Second
	// outputTail is how many of a job's output lines its feed keeps.
	outputTail = 200
	// liveBuffer is how many live records wait while a feed replays the history.
	liveBuffer = 1024
	// viewFresh is how long a job's page, once made, serves every viewer
	// while neither its records nor its job record change; viewMin how
	// long it serves them while new records come (the job record unchanged).
	viewFresh = time.Second
	viewMin   = 400 * time.Millisecond
	// maxFeeds bounds the jobs followed at once: past it the idle feeds
	// (no viewer, lingering) stop, and failing that a new one is refused.
	maxFeeds = 64
	// bigHistory is the number of steps past which a feed, once it has
	// read the history, gives the memory the reading took back to the
	// system at once rather than over the next minutes.
	bigHistory = 2000
	// replayWait bounds how long a page waits for its feed's history: a
	// warm feed has it, a cold one (a long history) fills the page in by
	// its first live update instead of holding the page back.
	replayWait = 100 * time.Millisecond
)

// feeds are the running feeds.
type feeds struct {
	ctx  context.Context
	as   func(api.Owner) Source
	self func() api.Owner
	log  *zap.Logger
	mu   sync.Mutex
	jobs map[string]*jobFeed
	all  *allFeed
	// closed is set once wait has begun: no feed starts after it.
	closed bool
	wg     sync.WaitGroup
}

func newFeeds(ctx context.Context, as func(api.Owner) Source, self func() api.Owner, log *zap.Logger) *feeds {
	return &feeds{ctx: ctx, as: as, self: self, log: log.Named("feeds"), jobs: map[string]*jobFeed{}}
}

// wait waits for every feed's goroutines, once the context has ended: a
// feed asked for after it starts none (job and allJobs look under fs.mu).
func (fs *feeds) wait() {
	fs.mu.Lock()
	fs.closed = true
	fs.mu.Unlock()
	fs.wg.Wait()
}

// signal is a broadcast of changes: the channel of the moment closes at the
// next change.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait is the channel that closes at the next change.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// fire tells the waiters of a change.
func (s *signal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// lease counts a feed's viewers and stops it feedLinger after the last.
type lease struct {
	viewers int
	idle    *time.Timer
}

// take counts a viewer in.
func (l *lease) take() {
	l.viewers++
	if l.idle != nil {
		l.idle.Stop()
		l.idle = nil
	}
}

// give counts a viewer out; stop runs (with fs.mu held) feedLinger after
// the last one, unless another has come meanwhile.
func (fs *feeds) give(l *lease, stop func()) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if l.viewers--; l.viewers > 0 {
		return
	}
	l.idle = time.AfterFunc(feedLinger, func() {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		if l.viewers == 0 {
			stop()
		}
	})
}

// outLine is a line of a job's output tail: a worker's line, or an event
// of the job's life.
type outLine struct {
	Attempt int
	Rank    int
	Stream  string // stdout, stderr, or "event"
	Text    string
	Time    time.Time
}

// jobFeed is one job's step records (rank 0's, each step once) and output tail.
type jobFeed struct {
	lease
	id     string
	cancel context.CancelFunc
	signal

	mu       sync.Mutex
	recs     []telemetry.StepRecord // appended only: a snapshot's elements never change
	seen     map[[2]int64]struct{}  // attempt, step
	tracker  *report.TopTracker
	m0       float64
	out      []outLine // the newest outputTail lines, oldest first
	replayed chan struct{}
	err      error
	// version counts the changes of recs and out; cached is the page
	// last made, which the viewers share; building is held while one is
	// made, so that the viewers wait for it rather than each make one.
	version  uint64
	cached   *cachedView
	building sync.Mutex
}

// cachedView is a job's page as made at a version of its feed, from a job
// record (as JSON), at a time; and the update that carries it.
type cachedView struct {
	version uint64
	job     []byte
	at      time.Time
	view    jobView
	update  *update
}

// errTooManyFeeds is a feed refused past maxFeeds.
var errTooManyFeeds = fmt.Errorf("%w: the dashboard follows %d jobs already; close some pages", api.ErrBadRequest, maxFeeds)

// job returns the feed of job j (starting it), counted as viewed until release.
func (fs *feeds) job(j api.Job) (*jobFeed, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.jobs[j.ID]
	if f == nil && len(fs.jobs) >= maxFeeds {
		for id, idle := range fs.jobs {
			if idle.viewers == 0 && idle.idle != nil {
				idle.idle.Stop()
				idle.cancel()
				delete(fs.jobs, id)
			}
		}
		if len(fs.jobs) >= maxFeeds {
			return nil, errTooManyFeeds
		}
	}
	if f == nil {
		ctx, cancel := context.WithCancel(fs.ctx)
		f = &jobFeed{id: j.ID, cancel: cancel, seen: map[[2]int64]struct{}{}, tracker: report.NewTopTracker(),
			m0: report.BaseBatch(j), replayed: make(chan struct{})}
		fs.jobs[j.ID] = f
		if fs.closed || fs.ctx.Err() != nil { // the dashboard is closing: a feed of nothing
			close(f.replayed)
			f.take()
			return f, nil
		}
		src := fs.as(ownerOf(j))
		fs.wg.Add(2)
		go func() {
			defer fs.wg.Done()
			f.followSteps(ctx, src)
		}()
		go func() {
			defer fs.wg.Done()
			f.followOutput(ctx, src, fs.log)
		}()
	}
	f.take()
	return f, nil
}

// release counts a viewer of f out.
func (fs *feeds) release(f *jobFeed) {
	fs.give(&f.lease, func() {
		f.cancel()
		if fs.jobs[f.id] == f {
			delete(fs.jobs, f.id)
		}
	})
}

// ownerOf is the owner of job j (root for a record older than owners).
func ownerOf(j api.Job) api.Owner {
	if j.Owner != nil {
		return *j.Owner
	}
	return api.Owner{User: "root"}
}

// followSteps replays the job's step records, then follows the new ones:
// live ones first, into a buffer, so that none falls between the two.
func (f *jobFeed) followSteps(ctx context.Context, src Source) {
	live := make(chan telemetry.StepRecord, liveBuffer)
	feed, err := src.FollowSteps(f.id, func(r telemetry.StepRecord) {
		select {
		case live <- r:
		default: // the buffer is full: the history holds it
		}
	})
	if err == nil {
		defer feed.Close()
		err = src.Steps(ctx, f.id, false, func(r telemetry.StepRecord) error {
			f.add(r)
			return nil
		})
	}
	f.mu.Lock()
	f.err = err
	n := len(f.recs)
	f.mu.Unlock()
	if n >= bigHistory {
		debug.FreeOSMemory()
	}
	close(f.replayed)
	f.fire()
	if feed == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-live:
			if f.add(r) {
				f.fire()
			}
		}
	}
}

// add takes a step record: rank 0's, each step of an attempt once.
func (f *jobFeed) add(r telemetry.StepRecord) bool {
	if r.Rank != 0 || !r.IsStep() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := [2]int64{int64(r.Attempt), r.Step}
	if _, dup := f.seen[k]; dup {
		return false
	}
	f.seen[k] = struct{}{}
	// What the page never reads is not kept: a long history is many records.
	r.Job, r.Kind, r.ComputeSeconds, r.SyncSeconds = f.id, "", nil, nil
	f.version++
	f.recs = append(f.recs, r)
	f.tracker.Add(r, f.m0)
	return true
}

// followOutput keeps the newest output lines and events, history first.
func (f *jobFeed) followOutput(ctx context.Context, src Source, log *zap.Logger) {
	err := src.Output(ctx, f.id, true, func(l *telemetry.LogLine, e *telemetry.Event) error {
		var o outLine
		if l != nil {
			o = outLine{Attempt: l.Attempt, Rank: l.Rank, Stream: l.Stream, Text: l.Line, Time: l.Time}
		} else {
			o = outLine{Attempt: e.Attempt, Stream: "event", Text: eventText(e), Time: e.Time}
		}
		f.mu.Lock()
		f.version++
		f.out = append(f.out, o)
		if len(f.out) > 2*outputTail {
			f.out = append(f.out[:0:0], f.out[len(f.out)-outputTail:]...)
		}
		f.mu.Unlock()
		f.fire()
		return nil
	})
	if err != nil && ctx.Err() == nil {
		log.Debug("follow output", zap.String("job", f.id), zap.Error(err))
	}
}

// eventText is an event of a job's life in words.
func eventText(e *telemetry.Event) string {
	s := string(e.Kind)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// jobSnap is what a feed holds at a moment.
type jobSnap struct {
	recs     []telemetry.StepRecord
	row      report.TopRow
	out      []outLine
	replayed bool
	err      error
}

// snapshot is the feed now, with job j's row of top (its speed and what
// is left) at now.
func (f *jobFeed) snapshot(j api.Job, now time.Time) jobSnap {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := jobSnap{recs: f.recs, err: f.err}
	if fr := report.BuildTopFrame([]api.Job{j}, f.tracker, nil, now); len(fr.Jobs) == 1 {
		s.row = fr.Jobs[0]
	}
	s.out = append(s.out, f.out[max(0, len(f.out)-outputTail):]...)
	select {
	case <-f.replayed:
		s.replayed = true
	default:
	}
	return s
}

// view is job j's page now, with the update that carries it (made by
// mkUpdate once, when first asked for): made again when the job record
// has changed, when the feed has and viewMin has passed, or viewFresh
// after it was made, so that the tabs on one job share the work.
func (f *jobFeed) view(j api.Job, now time.Time, mkUpdate func(jobView) (update, error)) (jobView, update, error) {
	key, _ := json.Marshal(j)
	f.building.Lock()
	defer f.building.Unlock()
	f.mu.Lock()
	c, ver := f.cached, f.version
	f.mu.Unlock()
	if c == nil || !bytes.Equal(c.job, key) || now.Sub(c.at) >= viewFresh || c.version != ver && now.Sub(c.at) >= viewMin {
		snap := f.snapshot(j, now)
		c = &cachedView{version: ver, job: key, at: now, view: buildJobView(j, report.Make(j, snap.recs, now), snap, now)}
	}
	if c.update == nil && mkUpdate != nil {
		u, err := mkUpdate(c.view)
		if err != nil {
			return c.view, u, err
		}
		shared := *c // another viewer may hold c: a copy gets the update
		shared.update = &u
		c = &shared
	}
	f.mu.Lock()
	f.cached = c
	f.mu.Unlock()
	if c.update == nil {
		return c.view, update{}, nil
	}
	return c.view, *c.update, nil
}
