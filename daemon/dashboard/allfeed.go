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
	// ready closes once the feed follows.
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
		f = &allFeed{cancel: cancel, tracker: report.NewTopTracker(), ready: make(chan struct{})}
		fs.all = f
		if fs.closed || fs.ctx.Err() != nil { // the dashboard is closing: a feed of nothing
			close(f.ready)
			f.take()
			return f
		}
		src := fs.as(fs.self())
		fs.wg.Add(1)
		go func() {
			defer fs.wg.Done()
			f.follow(ctx, src)
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

// follow follows every job's live steps. It reads no history: the jobs
// page shows speeds and steps, which the live steps of a second or two
// give, and a long history costs more to read than a page may take.
func (f *allFeed) follow(ctx context.Context, src Source) {
	defer f.readyOnce.Do(func() { close(f.ready) })
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
	f.readyOnce.Do(func() { close(f.ready) })
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

// add takes one record into the tracker. The jobs page shows no noise
// scale: the one the tracker follows is against the batch of the first
// record seen.
func (f *allFeed) add(r telemetry.StepRecord) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tracker.Add(r, float64(r.GlobalBatch))
}

// frame is top's frame of jobs at now, with the feed's figures.
func (f *allFeed) frame(jobs []api.Job, now time.Time) report.TopFrame {
	f.mu.Lock()
	defer f.mu.Unlock()
	return report.BuildTopFrame(jobs, f.tracker, nil, now)
}
