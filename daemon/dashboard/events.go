package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// A page's event stream (server-sent events) sends an update whenever
// what the page shows changes: the page's fragments rendered by its own
// templates (escaped as the page is) and, for a job, the charts' series.
// The script (static/app.js) puts each fragment in the element of its id.

// Bounds of the event streams.
const (
	// maxStreamsPerUser bounds a user's open event streams (tabs).
	maxStreamsPerUser = 16
	// keepAlive is how often a quiet stream says it is there; writeWait
	// bounds each write (a reader that takes no more ends its stream, and
	// a server's write timeout does not end a live one).
	keepAlive = 15 * time.Second
	writeWait = 30 * time.Second
	// jobGap and jobsGap are the least time between two updates of a job's
	// page and of the jobs page.
	jobGap  = 500 * time.Millisecond
	jobsGap = time.Second
)

// update is one event of a page's stream.
type update struct {
	HTML   map[string]string `json:"html,omitempty"`
	Charts *charts           `json:"charts,omitempty"`
	// Step is the job's last step (the job page).
	Step  int64  `json:"step,omitempty"`
	Error string `json:"error,omitempty"`
}

// events writes one page's event stream.
type events struct {
	s        *Server
	uid      uint32
	w        http.ResponseWriter
	rc       *http.ResponseController
	last     []byte
	lastSent time.Time
}

// startEvents starts an event stream for v, unless they have
// maxStreamsPerUser open (429).
func (s *Server) startEvents(w http.ResponseWriter, v viewer) (*events, bool) {
	s.mu.Lock()
	if s.streams == nil {
		s.streams = map[uint32]int{}
	}
	if s.streams[v.owner.UID] >= maxStreamsPerUser {
		s.mu.Unlock()
		http.Error(w, fmt.Sprintf("too many dashboard streams: %s has %d open; close some tabs", v.owner.User, maxStreamsPerUser),
			http.StatusTooManyRequests)
		return nil, false
	}
	s.streams[v.owner.UID]++
	s.mu.Unlock()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	e := &events{s: s, uid: v.owner.UID, w: w, rc: http.NewResponseController(w)}
	return e, e.rc.Flush() == nil
}

// done counts the stream out of its user's.
func (e *events) done() {
	e.s.mu.Lock()
	defer e.s.mu.Unlock()
	if e.s.streams[e.uid]--; e.s.streams[e.uid] <= 0 {
		delete(e.s.streams, e.uid)
	}
}

// send writes u unless it is the same as the last one (then, past
// keepAlive, a comment that keeps the connection open).
func (e *events) send(u update) error {
	b, err := json.Marshal(u)
	if err != nil {
		return fmt.Errorf("encode update: %w", err)
	}
	_ = e.rc.SetWriteDeadline(time.Now().Add(writeWait)) // not every writer has deadlines
	switch {
	case !bytes.Equal(b, e.last):
		_, err = fmt.Fprintf(e.w, "event: update\ndata: %s\n\n", b)
		e.last = b
	case time.Since(e.lastSent) > keepAlive:
		_, err = fmt.Fprint(e.w, ": alive\n\n")
	default:
		return nil
	}
	if err == nil {
		err = e.rc.Flush()
	}
	e.lastSent = time.Now()
	return err
}

// loop sends build's update, then again at each change (changed is the
// channel that closes at the next one) or every, at most once a gap,
// until ctx ends or the connection fails.
func (e *events) loop(ctx context.Context, changed func() <-chan struct{}, every, gap time.Duration, build func() (update, error)) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		ch := changed()
		u, err := build()
		if err != nil {
			u = update{Error: err.Error()}
		}
		if e.send(u) != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-e.s.base.Done():
			return
		case <-ch:
		case <-tick.C:
		}
		select {
		case <-ctx.Done():
			return
		case <-e.s.base.Done():
			return
		case <-time.After(gap):
		}
	}
}

func (s *Server) jobsEvents(w http.ResponseWriter, r *http.Request, v viewer) {
	f := s.feeds.allJobs()
	defer s.feeds.releaseAll(f)
	ev, ok := s.startEvents(w, v)
	if !ok {
		return
	}
	defer ev.done()
	q := r.URL.Query()
	ev.loop(r.Context(), f.wait, time.Second, jobsGap, func() (update, error) {
		jv, err := s.jobsView(r.Context(), v, f, q)
		if err != nil {
			return update{}, err
		}
		return s.fragments("jobs", jv, "jobs-rows", "jobs-count")
	})
}

// jobUpdate is the update of a job's page: its fragments and charts.
func (s *Server) jobUpdate(jv jobView) (update, error) {
	u, err := s.fragments("job", jv, "job-head", "job-attempts", "job-candidates", "job-decisions", "job-bill", "job-output")
	u.Charts, u.Step = &jv.Charts, jv.LastStep
	return u, err
}

// fragments is an update of page name's fragments rendered with v.
func (s *Server) fragments(name string, v any, ids ...string) (update, error) {
	u := update{HTML: map[string]string{}}
	for _, id := range ids {
		html, err := s.pages.fragment(name, id, v)
		if err != nil {
			return u, err
		}
		u.HTML[id] = html
	}
	return u, nil
}

// jobEvents streams a job's page. Another user's job is refused (403) as
// the API refuses it, before the stream starts.
func (s *Server) jobEvents(w http.ResponseWriter, r *http.Request, v viewer) {
	ctx := r.Context()
	id := r.PathValue("id")
	j, f, err := s.openJob(ctx, v, id)
	if err != nil {
		http.Error(w, err.Error(), statusOf(err))
		return
	}
	defer s.feeds.release(f)
	ev, ok := s.startEvents(w, v)
	if !ok {
		return
	}
	defer ev.done()
	src := s.o.As(v.owner)
	ev.loop(ctx, f.wait, time.Second, jobGap, func() (update, error) {
		if nj, err := src.Job(ctx, id); err == nil {
			j = nj
		}
		_, u, err := f.view(j, time.Now(), s.jobUpdate)
		return u, err
	})
}
