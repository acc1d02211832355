package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/aggregates"
	"github.com/scavenger-ml/scavenger/daemon/jobindex"
	"github.com/scavenger-ml/scavenger/internal/testdir"
	"github.com/scavenger-ml/scavenger/internal/testnats"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// The tests serve the API as the daemon does, on a real unix socket and
// over real NATS (an embedded nats-server) and JetStream, without root: a
// caller's identity, which production takes only from the kernel
// (SO_PEERCRED) or a bearer token, is set here on a test listener's
// connections (as), the way ConnContext sets it from the peer's
// credentials. The job registry is a small in-memory one (registry): what
// is under test is who may do what, not the jobs.

// The callers of the tests.
var (
	alice = api.Owner{UID: 1001, GID: 1001, User: "alice"}
	bob   = api.Owner{UID: 1002, GID: 1002, User: "bob"}
	root  = api.Owner{User: "root"}
)

// registry is the job records of a cluster, in memory, as every node's
// registry reads them; calls lists what the API asked of it.
type registry struct {
	mu    sync.Mutex
	idx   *jobindex.Index // the summaries of jobs, as their runners write them
	jobs  map[string]api.Job
	calls []string
	// deadline is how long the context of the last call had left.
	deadline time.Duration
	n        int
}

// add records a job of owner (nil: root's, as records older than owners)
// running on node.
func (r *registry) add(id, node string, owner *api.Owner) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs == nil {
		r.jobs = map[string]api.Job{}
	}
	r.jobs[id] = api.Job{ID: id, Name: id, Owner: owner, Node: node, State: api.StateRunning}
	r.summarize(r.jobs[id])
}

// summarize writes j's summary to the job index (when the registry has
// one), as a runner does with its record; r.mu is held.
func (r *registry) summarize(j api.Job) {
	if r.idx == nil {
		return
	}
	if err := r.idx.Put(context.Background(), j.Summary()); err != nil {
		panic(err)
	}
}

// asked lists the calls so far and forgets them.
func (r *registry) asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

// active lists the running jobs of node, as the daemon's Info does.
func (r *registry) active(node string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id, j := range r.jobs {
		if j.Node == node && j.State == api.StateRunning {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// on is the registry as node's daemon sees it: the node's daemon acts on
// its own jobs.
func (r *registry) on(node string) *nodeJobs { return &nodeJobs{r: r, node: node} }

// nodeJobs is the registry of one node's daemon (Jobs).
type nodeJobs struct {
	r    *registry
	node string
}

// act records a call and returns the job after change (an error for an
// unknown job).
func (n *nodeJobs) act(ctx context.Context, what, id string, change func(*api.Job)) (api.Job, error) {
	r := n.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if d, ok := ctx.Deadline(); ok {
		r.deadline = time.Until(d)
	}
	j, ok := r.jobs[id]
	if !ok {
		return api.Job{}, fmt.Errorf("job %s: %w", id, api.ErrNoJob)
	}
	if what != "" {
		r.calls = append(r.calls, n.node+" "+what+" "+id)
	}
	if change != nil {
		change(&j)
		r.jobs[id] = j
		r.summarize(j)
	}
	return j, nil
}

func (n *nodeJobs) Submit(ctx context.Context, req api.RunRequest, owner api.Owner) (api.Job, error) {
	r := n.r
	r.mu.Lock()
	r.n++
	id := req.Name + "-" + strconv.Itoa(r.n)
	r.mu.Unlock()
	r.add(id, n.node, &owner)
	return n.act(ctx, "run", id, func(j *api.Job) { j.Command = req.Command })
}

func (n *nodeJobs) Resume(ctx context.Context, id string, _ []string, _ api.Owner) (api.Job, error) {
	return n.act(ctx, "resume", id, func(j *api.Job) { j.State = api.StateRunning })
}

func (n *nodeJobs) Get(ctx context.Context, id string) (api.Job, error) {
	return n.act(ctx, "", id, nil)
}

func (n *nodeJobs) Stop(id string, _ time.Duration) (api.Job, error) {
	return n.act(context.Background(), "stop", id, func(j *api.Job) { j.State = api.StateStopped })
}

func (n *nodeJobs) Move(ctx context.Context, id string, cfg plugins.Config, reason string) (api.Job, error) {
	return n.act(ctx, "move "+reason, id, func(j *api.Job) { j.Config = cfg })
}

func (n *nodeJobs) Pin(ctx context.Context, id string, cfg plugins.Config, reason string, pin bool) (api.Job, error) {
	return n.act(ctx, "move "+reason, id, func(j *api.Job) { j.Config, j.Pinned = cfg, pin })
}

// allocations is the allocation records, in memory.
type allocations struct {
	mu  sync.Mutex
	all []api.Allocation
}

func (a *allocations) Report(_ context.Context, ev api.AllocationEvent) (api.Allocation, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.all = append(a.all, ev.Allocation)
	return ev.Allocation, nil
}

func (a *allocations) List(context.Context) ([]api.Allocation, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.all), nil
}

// fixture is a root daemon's Server of node n1 over a real NATS server, with jobs of
// alice (alice-1 here, alice-2 on node n2), bob (bob-1) and root (old-1,
// a record of no owner).
type fixture struct {
	srv     *Server
	jobs    *registry
	allocs  *allocations
	nc      *nats.Conn
	js      jetstream.JetStream
	digests jetstream.KeyValue // the step digests' bucket
	dir     string
	socks   map[string]string // test listeners by caller
}

// newFixture serves the API of node n1; opt, when set, changes its options.
func newFixture(t *testing.T, opt func(*Options)) *fixture {
	t.Helper()
	nc, js := testnats.JetStream(t)
	st, err := history.OpenStore(t.Context(), js, history.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	idx, err := jobindex.Open(t.Context(), st.JobIndex, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(idx.Close)
	f := &fixture{jobs: &registry{idx: idx}, allocs: &allocations{}, nc: nc, js: js, digests: st.StepDigests, dir: testdir.Short(t, "apis"), socks: map[string]string{}}
	f.jobs.add("alice-1", "n1", &alice)
	f.jobs.add("alice-2", "n2", &alice)
	f.jobs.add("bob-1", "n1", &bob)
	f.jobs.add("old-1", "n1", nil)
	f.srv = f.serve(t, "n1", opt)
	return f
}

// serve starts the API server of node on the fixture's NATS and jobs.
func (f *fixture) serve(t *testing.T, node string, opt func(*Options)) *Server {
	t.Helper()
	digests := &aggregates.Store{JS: f.js, KV: f.digests, Log: zaptest.NewLogger(t)}
	o := Options{Log: zaptest.NewLogger(t).Named(node), Jobs: f.jobs.on(node), Allocations: f.allocs, Index: f.jobs.idx, Digests: digests,
		JS: f.js, NC: f.nc, Node: node,
		Info:   func() api.Info { return api.Info{Node: node, Active: f.jobs.active(node)} },
		Ingest: func() api.IngestStats { return api.IngestStats{Accepted: 7} },
		Socket: filepath.Join(f.dir, node+".sock")}
	if opt != nil {
		opt(&o)
	}
	s, err := Listen(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	// A root daemon, whoever runs the tests; set before the test listeners
	// serve (the socket Listen made, whose callers are the test's own user,
	// is not used with it).
	s.self = root
	return s
}

// sock is the path of a test listener of f.srv whose every connection is
// who's (nil: a connection with no identity at all).
func (f *fixture) sock(t *testing.T, who *api.Owner) string {
	t.Helper()
	name := "anon"
	if who != nil {
		name = who.User
	}
	if p, ok := f.socks[name]; ok {
		return p
	}
	path := filepath.Join(f.dir, name+".sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var connCtx func(context.Context, net.Conn) context.Context
	if who != nil {
		id := *who
		connCtx = func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, callerKey{}, caller{owner: id})
		}
	}
	f.srv.serve(ln, nil, connCtx)
	f.socks[name] = path
	return path
}

// as is an API client whose caller is who.
func (f *fixture) as(t *testing.T, who api.Owner) *api.Client {
	t.Helper()
	c, err := api.Dial(t.Context(), f.sock(t, &who), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// do makes a raw HTTP request of the API as who (nil: no identity) and
// returns its status and envelope (a stream's first line).
func (f *fixture) do(t *testing.T, who *api.Owner, method, path string, body []byte) (int, api.Reply) {
	t.Helper()
	sock := f.sock(t, who)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	return request(t, hc, method, "http://scavd"+path, "", body)
}

// request makes one HTTP request and reads its status and envelope.
func request(t *testing.T, hc *http.Client, method, url, token string, body []byte) (int, api.Reply) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep api.Reply
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if line, _, _ := bytes.Cut(b, []byte("\n")); len(line) > 0 {
		_ = json.Unmarshal(line, &rep)
	}
	return resp.StatusCode, rep
}

// call posts verb's request (a value to encode, or raw bytes) as who.
func (f *fixture) call(t *testing.T, who api.Owner, verb string, req any) (int, api.Reply) {
	t.Helper()
	body, ok := req.([]byte)
	if !ok {
		var err error
		if body, err = json.Marshal(req); err != nil {
			t.Fatal(err)
		}
	}
	return f.do(t, &who, http.MethodPost, api.PathCall+verb, body)
}
