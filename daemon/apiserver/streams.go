package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// frames writes a stream's frames, one JSON object a line, each written
// within the server's write timeout (a peer that takes none ends the
// stream). A frame is flushed at once, but for a message of a history that
// has more messages right behind it: those are flushed together, once
// flushAt bytes wait or the history has caught up (a replay of many
// messages is not a write to the socket each).
type frames struct {
	w       http.ResponseWriter
	s       *Server
	mu      sync.Mutex
	pending int // bytes written since the last flush
}

// flushAt is how many bytes of a history's frames may wait for a flush.
const flushAt = 64 << 10

func (f *frames) write(fr api.Frame) error { return f.put(fr, false) }

// put writes a frame and flushes unless more follows and too little waits.
func (f *frames) put(fr api.Frame, more bool) error {
	b, _ := json.Marshal(fr)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s.writeWithin(f.w, 0)
	if _, err := f.w.Write(append(b, '\n')); err != nil {
		return err
	}
	if f.pending += len(b) + 1; more && f.pending < flushAt {
		return nil
	}
	f.pending = 0
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return nil
}

// msg writes a message of the daemon's history.
func (f *frames) msg(m jetstream.Msg, data []byte) error {
	var seq uint64
	more := false
	if md, err := m.Metadata(); err == nil {
		seq, more = md.Sequence.Stream, md.NumPending > 0
	}
	return f.put(api.Frame{Seq: seq, Subject: m.Subject(), Data: string(data)}, more)
}

// stream serves a history or the live records (api.Stream*), as the caller may read them.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	who, err := callerOf(ctx)
	if err != nil {
		reply(w, http.StatusUnauthorized, nil, err)
		return
	}
	q := r.URL.Query()
	what, job, follow := q.Get("what"), q.Get("job"), q.Get("follow") == "1"
	after, _ := strconv.ParseUint(q.Get("after"), 10, 64)
	var j api.Job
	if job != "" || what == api.StreamSteps || what == api.StreamOutput || what == api.StreamLastStep {
		if j, err = s.owned(ctx, who, job, "read"); err != nil {
			reply(w, status(err), nil, err)
			return
		}
	}
	var open func(context.Context, *frames) error
	if what == api.StreamSteps && after == 0 && (q.Get("last") != "" || q.Get("since") != "") {
		open, err = s.stepsIn(j, q.Get("last"), q.Get("since"), follow)
	} else {
		open, err = s.opener(what, job, q, after, follow, who)
	}
	if err != nil {
		reply(w, status(err), nil, err)
		return
	}
	done, err := s.openStream(who)
	if err != nil {
		reply(w, status(err), nil, err)
		return
	}
	defer done()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	f := &frames{w: w, s: s}
	if err := open(ctx, f); err != nil && ctx.Err() == nil {
		_ = f.write(api.Frame{Error: err.Error()})
	}
}

// opener is the function that serves one stream to f.
func (s *Server) opener(what, job string, q map[string][]string, after uint64, follow bool, who api.Owner) (func(context.Context, *frames) error, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	js := s.o.JS
	switch what {
	case api.StreamSteps:
		return s.replay(telemetry.StepStream, []string{telemetry.StepSubject(job)}, after, follow, nil), nil
	case api.StreamOutput:
		return s.replay(telemetry.OutputStream, []string{telemetry.LogSubject(job), telemetry.LogTailSubject(job), telemetry.EventSubject(job)}, after, follow, nil), nil
	case api.StreamLastStep:
		return func(ctx context.Context, f *frames) error { return lastStep(ctx, js, job, f) }, nil
	case api.StreamLive:
		return func(ctx context.Context, f *frames) error { return s.live(ctx, job, who, f) }, nil
	case api.StreamNodes:
		return s.replay(telemetry.NodeStream, nodeSubjects(get("node"), get("kind")), after, follow, s.nodeFilter(who)), nil
	case api.StreamNodesLatest:
		filter := s.nodeFilter(who)
		return func(ctx context.Context, f *frames) error {
			return history.ReplayLast(ctx, js, telemetry.NodeStream, nodeSubjects("", ""), follow, func(m jetstream.Msg) error {
				return f.msg(m, filter(ctx, m.Data()))
			})
		}, nil
	case api.StreamNodesSince:
		ns, err := strconv.ParseInt(get("since"), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: since %q is not Unix nanoseconds", api.ErrBadRequest, get("since"))
		}
		filter := s.nodeFilter(who)
		return func(ctx context.Context, f *frames) error {
			return history.ReplaySince(ctx, js, telemetry.NodeStream, nodeSubjects("", get("kind")), time.Unix(0, ns), func(m jetstream.Msg) error {
				return f.msg(m, filter(ctx, m.Data()))
			})
		}, nil
	}
	return nil, fmt.Errorf("%w: no stream %q", api.ErrBadRequest, what)
}

// replay serves the messages of stream on subjects after the sequence
// after; filter, when set, rewrites each message's data for the caller.
func (s *Server) replay(stream string, subjects []string, after uint64, follow bool, filter func(context.Context, []byte) []byte) func(context.Context, *frames) error {
	return func(ctx context.Context, f *frames) error {
		return history.ReplayAfter(ctx, s.o.JS, stream, subjects, after, follow, func(m jetstream.Msg) error {
			data := m.Data()
			if filter != nil {
				data = filter(ctx, data)
			}
			return f.msg(m, data)
		})
	}
}

// stepsIn serves job j's newest step records only: the last of them
// (last: a count), or those stored since a time (since: Unix nanoseconds).
// The job's step digest says where the last records start; the records of
// the first message before them are left out of its frame.
func (s *Server) stepsIn(j api.Job, last, since string, follow bool) (func(context.Context, *frames) error, error) {
	subjects := []string{telemetry.StepSubject(j.ID)}
	if last == "" {
		ns, err := strconv.ParseInt(since, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: since %q is not Unix nanoseconds", api.ErrBadRequest, since)
		}
		read := history.ReplaySince
		if follow {
			read = history.FollowSince
		}
		return func(ctx context.Context, f *frames) error {
			return read(ctx, s.o.JS, telemetry.StepStream, subjects, time.Unix(0, ns), func(m jetstream.Msg) error { return f.msg(m, m.Data()) })
		}, nil
	}
	n, err := strconv.ParseInt(last, 10, 64)
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("%w: last %q is not a count of records (1 or more)", api.ErrBadRequest, last)
	}
	return func(ctx context.Context, f *frames) error {
		after, skip, err := s.o.Digests.Start(ctx, j, n)
		if err != nil {
			return err
		}
		return history.ReplayAfter(ctx, s.o.JS, telemetry.StepStream, subjects, after, follow, func(m jetstream.Msg) error {
			data := m.Data()
			if skip > 0 {
				data, skip = dropRecords(data, skip)
				if len(data) == 0 {
					return nil
				}
			}
			return f.msg(m, data)
		})
	}, nil
}

// dropRecords leaves out the first n records of a step message (lines);
// left is how many more are to go.
func dropRecords(data []byte, n int64) (rest []byte, left int64) {
	for n > 0 && len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return nil, n - 1
		}
		if len(bytes.TrimSpace(data[:i])) > 0 {
			n--
		}
		data = data[i+1:]
	}
	return data, n
}

// lastStep serves the newest step message of job (none when it has none).
func lastStep(ctx context.Context, js jetstream.JetStream, job string, f *frames) error {
	m, err := history.LastStepMsg(ctx, js, job)
	if m == nil || err != nil {
		return err
	}
	return f.write(api.Frame{Seq: m.Sequence, Subject: m.Subject, Data: string(m.Data)})
}

// Bounds on what one live stream holds for a reader slower than the
// records it follows: past them the stream skips messages (they stay in the
// step history), so a stream its reader never reads costs at most this
// much, whatever the jobs publish.
const (
	livePendingMsgs  = 1024
	livePendingBytes = 1 << 20
)

// live serves the step records published from now on: job's, or every job
// the caller may read. A first empty frame says that it follows. A reader
// that falls more than livePendingBytes behind misses messages.
func (s *Server) live(ctx context.Context, job string, who api.Owner, f *frames) error {
	subj := telemetry.AllSteps
	if job != "" {
		subj = telemetry.StepSubject(job)
	}
	ctx, end := context.WithCancelCause(ctx)
	// mu orders the callback's frames after the first one, and none once
	// ctx has ended (the callback runs on the subscription's goroutine;
	// the handler's writer is not to be used after it returns).
	var mu sync.Mutex
	mu.Lock()
	sub, err := s.o.NC.Subscribe(subj, func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() != nil || job == "" && !s.owners.readable(ctx, who, telemetry.JobOfSubject(m.Subject)) {
			return
		}
		if err := f.write(api.Frame{Subject: m.Subject, Data: string(m.Data)}); err != nil {
			end(err)
		}
	})
	if err != nil {
		mu.Unlock()
		end(nil)
		return fmt.Errorf("follow %s: %w", subj, err)
	}
	defer func() {
		_ = sub.Unsubscribe()
		mu.Lock() // a frame under way is written first, and none after
		end(nil)
		mu.Unlock()
	}()
	err = sub.SetPendingLimits(livePendingMsgs, livePendingBytes)
	if err == nil {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = s.o.NC.FlushWithContext(fctx)
		cancel()
	}
	if err != nil {
		mu.Unlock()
		return fmt.Errorf("follow %s: %w", subj, err)
	}
	err = f.write(api.Frame{})
	mu.Unlock()
	if err != nil {
		return err
	}
	<-ctx.Done()
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// nodeSubjects are the node-sample subjects of node (every node when
// empty) and kind (both when empty).
func nodeSubjects(node, kind string) []string {
	kinds := []string{telemetry.NodeGPU, telemetry.NodeHost}
	if kind != "" {
		kinds = []string{kind}
	}
	n := "*"
	if node != "" {
		n = telemetry.SubjectNode(node)
	}
	out := make([]string, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, telemetry.NodeSubject(n, k))
	}
	return out
}

// nodeFilter leaves out of a node sample what the caller may not see: the
// processes of other users' jobs, and which job holds a GPU's memory.
func (s *Server) nodeFilter(who api.Owner) func(context.Context, []byte) []byte {
	if who.Root() {
		return func(_ context.Context, b []byte) []byte { return b }
	}
	return func(ctx context.Context, b []byte) []byte {
		n, err := telemetry.DecodeNodeSample(b)
		if err != nil {
			return b
		}
		if n.Host != nil {
			kept := n.Host.Jobs[:0]
			for _, u := range n.Host.Jobs {
				if s.owners.readable(ctx, who, u.Job) {
					kept = append(kept, u)
				}
			}
			n.Host.Jobs = kept
		}
		for i := range n.GPUs {
			for k, p := range n.GPUs[i].Processes {
				if p.Job != "" && !s.owners.readable(ctx, who, p.Job) {
					n.GPUs[i].Processes[k].Job = ""
				}
			}
		}
		out, _ := json.Marshal(n)
		return out
	}
}

// ownerCache says whose each job is, for the streams that mix jobs: the
// job index knows.
type ownerCache struct {
	index Index
}

// readable reports whether who may read job id.
func (c *ownerCache) readable(_ context.Context, who api.Owner, id string) bool {
	if who.Root() {
		return true
	}
	s, ok := c.index.Get(id)
	return ok && s.Owner != nil && s.Owner.UID == who.UID
}
