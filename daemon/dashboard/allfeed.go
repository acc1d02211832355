package dashboard

import (
	"context"
	"sync"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/report"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// allFeed is the live figures of every job the daemon's user may read, as
// top folds them: the jobs pages' shared feed.
type allFeed struct {
	lease
	cancel context.CancelFunc
	signal
	mu      sync.Mutex
	tracker *report.TopTracker
	m0      map[string]float64 // the follow goroutine's
	// ready closes once the active jobs' history is read.
	ready     chan struct{}
	readyOnce sync.Once
}

// allJobs returns the shared feed of every job's steps (starting it),
// counted as viewed until releaseAll.
func (fs *feeds) allJobs() *allFeed {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.all
	if f == nil {
		ctx, cancel := context.WithCancel(fs.ctx)
		f = &allFeed{cancel: cancel, tracker: report.NewTopTracker(), m0: map[string]float64{}, ready: make(chan struct{})}
		fs.all = f
		self := fs.self()
		src := fs.as(self)
		fs.wg.Add(1)
		go func() {
			defer fs.wg.Done()
			f.follow(ctx, src, self.Root())
		}()
	}
	f.take()
	return f
}

// releaseAll counts a viewer of the shared feed out.
func (fs *feeds) releaseAll(f *allFeed) {
	fs.give(&f.lease, func() {
		f.cancel()
		if fs.all == f {
			fs.all = nil
		}
	})
}

// follow follows every job's live steps and, meanwhile, replays the
// history of the active ones (as top does: the tracker takes each step once).
func (f *allFeed) follow(ctx context.Context, src Source, root bool) {
	markReady := func() { f.readyOnce.Do(func() { close(f.ready) }) }
	defer markReady()
	live := make(chan telemetry.StepRecord, liveBuffer)
	feed, err := src.FollowSteps("", func(r telemetry.StepRecord) {
		if r.Rank != 0 {
			return
		}
		select {
		case live <- r:
		default:
		}
	})
	if err != nil {
		return
	}
	defer feed.Close()
	list := src.Jobs
	if root {
		list = src.AllJobs
	}
	if jobs, err := list(ctx); err == nil {
		for _, j := range jobs {
			f.m0[j.ID] = report.BaseBatch(j)
		}
		for _, j := range jobs {
			if j.State.Done() {
				continue
			}
			_ = src.Steps(ctx, j.ID, false, func(r telemetry.StepRecord) error {
				f.add(r)
				return nil
			})
		}
	}
	markReady()
	f.fire()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-live:
			f.add(r)
			f.fire()
		}
	}
}

// add takes one record into the tracker; a job first seen live is
// measured against its record's batch (its first attempt's, as BaseBatch).
func (f *allFeed) add(r telemetry.StepRecord) {
	m0, ok := f.m0[r.Job]
	if !ok {
		m0 = float64(r.GlobalBatch)
		f.m0[r.Job] = m0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tracker.Add(r, m0)
}

// frame is top's frame of jobs at now, with the feed's figures.
func (f *allFeed) frame(jobs []api.Job, now time.Time) report.TopFrame {
	f.mu.Lock()
	defer f.mu.Unlock()
	return report.BuildTopFrame(jobs, f.tracker, nil, now)
}
