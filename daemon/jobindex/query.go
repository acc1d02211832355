package jobindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
)

// List is the page of the index req asks for, of the jobs who may list:
// their own, or with req.All every user's (the caller checks that who may
// ask for all). The page holds summaries; Records are the caller's to add.
func (x *Index) List(req api.JobsRequest, who api.Owner) (api.JobPage, error) {
	if err := req.Validate(); err != nil {
		return api.JobPage{}, err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	end := len(x.order)
	if req.Before != "" {
		e := x.byID[req.Before]
		if e == nil {
			return api.JobPage{}, fmt.Errorf("%w: the page before job %s: it is no longer in the index (list again)", api.ErrNoJob, req.Before)
		}
		end = x.at(e)
	}
	page := api.JobPage{Jobs: []api.JobSummary{}}
	for i := end - 1; i >= 0; i-- {
		s := x.order[i].s
		if !req.All && !s.OwnedBy(who) || !req.Match(s) {
			continue
		}
		if req.Limit > 0 && len(page.Jobs) == req.Limit {
			page.More++
			continue
		}
		page.Jobs = append(page.Jobs, s)
	}
	for i, j := 0, len(page.Jobs)-1; i < j; i, j = i+1, j-1 {
		page.Jobs[i], page.Jobs[j] = page.Jobs[j], page.Jobs[i]
	}
	if page.More > 0 {
		page.Before = page.Jobs[0].ID
	}
	return page, nil
}

// at is e's position in the order; x.mu is held.
func (x *Index) at(e *entry) int {
	lo, hi := 0, len(x.order)
	for lo < hi {
		m := (lo + hi) / 2
		if x.order[m].s.Before(e.s) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Resolve finds the job ref names among who's jobs (every user's with all):
// its id, its name (the newest of that name) or a prefix of its id no
// other job shares (api.Pick). note says which of several jobs of the name
// it took.
func (x *Index) Resolve(ref string, who api.Owner, all bool) (s api.JobSummary, note string, err error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if e := x.byID[ref]; e != nil && (all || e.s.OwnedBy(who)) {
		return e.s, "", nil
	}
	// Only the jobs ref can name (by id, id prefix or name) go to Pick, not
	// every summary: copying them all cost more than the rest.
	var fits []api.JobSummary
	for _, e := range x.order {
		if (all || e.s.OwnedBy(who)) && (e.s.Name == ref || strings.HasPrefix(e.s.ID, ref)) {
			fits = append(fits, e.s)
		}
	}
	return api.Pick(fits, ref)
}

// Unfinished lists the jobs of node whose summary says they have not
// ended, oldest first: what a daemon's recovery reads the records of.
func (x *Index) Unfinished(node string) []api.JobSummary {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []api.JobSummary
	for _, e := range x.order {
		if e.s.Node == node && !e.s.State.Done() {
			out = append(out, e.s)
		}
	}
	return out
}

// Ended lists the jobs of node that have ended and are not kept, oldest
// first, and counts every job of node: what retention chooses from.
func (x *Index) Ended(node string) (ended []api.JobSummary, all int) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, e := range x.order {
		if e.s.Node != node {
			continue
		}
		all++
		if e.s.State.Done() && !e.s.Kept {
			ended = append(ended, e.s)
		}
	}
	return ended, all
}

// build writes the summaries the index lacks of the records in records:
// those of a store that predates the index, or written by a daemon that did
// not keep it. It reads the records only when the bucket holds more of them
// than the index holds summaries (its count of values includes the markers
// of removed records: the retention removes them).
func (x *Index) build(ctx context.Context, records jetstream.KeyValue) error {
	if records == nil {
		return nil
	}
	st, err := records.Status(ctx)
	if err != nil {
		return fmt.Errorf("read the job bucket's status: %w", err)
	}
	if st.Values() <= uint64(x.Len()) {
		return nil
	}
	// One watch of the records (not a read per record), and the summaries
	// they lack created all at once (not a write after the other).
	w, err := records.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("read the job records to index: %w", err)
	}
	var missing []api.JobSummary
	for e := range w.Updates() {
		if e == nil {
			break
		}
		if _, ok := x.Get(e.Key()); ok {
			continue
		}
		var j api.Job
		if err := json.Unmarshal(e.Value(), &j); err != nil || j.ID != e.Key() {
			x.log.Warn("a job record the index cannot read; it is left out", zap.String("job", e.Key()), zap.Error(err))
			continue
		}
		missing = append(missing, j.Summary())
	}
	_ = w.Stop()
	if err := x.create(ctx, missing); err != nil {
		return err
	}
	if len(missing) > 0 {
		x.log.Info("job index: summaries written for records it lacked", zap.Int("jobs", len(missing)))
	}
	return nil
}

// createInFlight bounds the summaries create writes at once.
const createInFlight = 32

// create writes new summaries into the bucket and the view, many at once
// (not each waiting for the one before).
func (x *Index) create(ctx context.Context, ss []api.JobSummary) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	next := make(chan api.JobSummary)
	for range min(createInFlight, len(ss)) {
		wg.Go(func() {
			for s := range next {
				if err := x.Put(ctx, s); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, s := range ss {
		next <- s
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}
