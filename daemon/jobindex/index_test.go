package jobindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testnats"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

var (
	alice = api.Owner{UID: 1001, GID: 1001, User: "alice"}
	bob   = api.Owner{UID: 1002, GID: 1002, User: "bob"}
	root  = api.Owner{User: "root"}
)

// open opens a store on an embedded JetStream and its index.
func open(t *testing.T) (*history.Store, *Index) { return openB(t) }

// openB is open for a test or a benchmark.
func openB(t testing.TB) (*history.Store, *Index) {
	t.Helper()
	_, js := testnats.JetStream(t)
	st, err := history.OpenStore(t.Context(), js, history.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := Open(t.Context(), st.JobIndex, st.Jobs, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Close)
	return st, x
}

// job is a summary of a job of owner created m minutes after a fixed time.
func job(id, name string, owner *api.Owner, state api.JobState, m int) api.JobSummary {
	return api.JobSummary{ID: id, Name: name, Owner: owner, Node: "n1", State: state,
		Created: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC).Add(time.Duration(m) * time.Minute)}
}

func ids(ss []api.JobSummary) []string {
	out := []string{}
	for _, s := range ss {
		out = append(out, s.ID)
	}
	return out
}

// TestListPagesAndFilters: a listing is the caller's jobs (every user's
// with All) that match every filter, the newest Limit of them oldest first,
// and the page before a job goes on where the last one stopped; the
// summaries put in are those listed, with their latest state.
func TestListPagesAndFilters(t *testing.T) {
	_, x := open(t)
	ctx := t.Context()
	for i := 0; i < 7; i++ {
		state := api.StateSucceeded
		if i%3 == 0 {
			state = api.StateRunning
		}
		if err := x.Put(ctx, job(fmt.Sprintf("a%d-000000", i), "train", &alice, state, i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []api.JobSummary{job("b0-000000", "train", &bob, api.StateFailed, 10), job("r0-000000", "eval", nil, api.StateStopped, 11)} {
		if err := x.Put(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// A later write of a job replaces its summary, in its place.
	if err := x.Put(ctx, job("a3-000000", "train", &alice, api.StateFailed, 3)); err != nil {
		t.Fatal(err)
	}
	since := job("", "", nil, "", 4).Created
	for _, c := range []struct {
		name   string
		who    api.Owner
		req    api.JobsRequest
		want   []string
		more   int
		before string
	}{
		{"alice's", alice, api.JobsRequest{}, []string{"a0-000000", "a1-000000", "a2-000000", "a3-000000", "a4-000000", "a5-000000", "a6-000000"}, 0, ""},
		{"bob's", bob, api.JobsRequest{}, []string{"b0-000000"}, 0, ""},
		{"root's own: those of no owner", root, api.JobsRequest{}, []string{"r0-000000"}, 0, ""},
		{"every user's", root, api.JobsRequest{All: true, Limit: 3}, []string{"a6-000000", "b0-000000", "r0-000000"}, 6, "a6-000000"},
		{"one user's of every user's", root, api.JobsRequest{All: true, User: "bob"}, []string{"b0-000000"}, 0, ""},
		{"root's of every user's", root, api.JobsRequest{All: true, User: "root"}, []string{"r0-000000"}, 0, ""},
		{"the newest 2", alice, api.JobsRequest{Limit: 2}, []string{"a5-000000", "a6-000000"}, 5, "a5-000000"},
		{"the page before", alice, api.JobsRequest{Limit: 2, Before: "a5-000000"}, []string{"a3-000000", "a4-000000"}, 3, "a3-000000"},
		{"the last page", alice, api.JobsRequest{Limit: 2, Before: "a1-000000"}, []string{"a0-000000"}, 0, ""},
		{"active", alice, api.JobsRequest{State: api.StateActive}, []string{"a0-000000", "a6-000000"}, 0, ""},
		{"ended", alice, api.JobsRequest{State: api.StateEnded, Limit: 1}, []string{"a5-000000"}, 4, "a5-000000"},
		{"a state", alice, api.JobsRequest{State: string(api.StateFailed)}, []string{"a3-000000"}, 0, ""},
		{"a name", root, api.JobsRequest{All: true, Name: "eval"}, []string{"r0-000000"}, 0, ""},
		{"since", alice, api.JobsRequest{Since: &since}, []string{"a4-000000", "a5-000000", "a6-000000"}, 0, ""},
	} {
		p, err := x.List(c.req, c.who)
		if err != nil || !slices.Equal(ids(p.Jobs), c.want) || p.More != c.more || p.Before != c.before {
			t.Errorf("%s: %v (more %d, before %q), %v; want %v (more %d, before %q)", c.name, ids(p.Jobs), p.More, p.Before, err, c.want, c.more, c.before)
		}
	}
	if _, err := x.List(api.JobsRequest{State: "sleeping"}, alice); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("an unknown state: %v, want a bad request", err)
	}
	if _, err := x.List(api.JobsRequest{Before: "gone-000000"}, alice); !errors.Is(err, api.ErrNoJob) {
		t.Errorf("the page before a job that is gone: %v, want no job", err)
	}
	// Another daemon's view (a second watcher of the bucket) sees the same.
	other, err := Open(ctx, x.kv, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if p, _ := other.List(api.JobsRequest{All: true}, root); len(p.Jobs) != 9 {
		t.Errorf("a second view lists %v, want the 9 jobs", ids(p.Jobs))
	}
	if s, _ := other.Get("a3-000000"); s.State != api.StateFailed {
		t.Errorf("a second view has a3 %s, want its latest state, failed", s.State)
	}
}

// TestResolve: a job is named by id, by its name (the newest of that name,
// said so) or by a prefix of its id only it has, among the caller's jobs:
// another user's job is named only with All (root), and is otherwise no
// job at all, in the same words as one that does not exist.
func TestResolve(t *testing.T) {
	_, x := open(t)
	ctx := t.Context()
	for _, s := range []api.JobSummary{
		job("train-aaa111", "train", &alice, api.StateSucceeded, 1), job("train-aab222", "train", &alice, api.StateSucceeded, 3),
		job("eval-ccc333", "eval", &alice, api.StateSucceeded, 2), job("bobs-ddd444", "bobs", &bob, api.StateRunning, 4),
	} {
		if err := x.Put(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		ref, want, note, err string
		who                  api.Owner
		all                  bool
	}{
		{ref: "eval-ccc333", want: "eval-ccc333", who: alice},
		{ref: "ev", want: "eval-ccc333", who: alice},
		{ref: "train", want: "train-aab222", note: "2 jobs are named train; train-aab222 is the newest", who: alice},
		{ref: "train-aa", err: "2 jobs' ids start with it", who: alice},
		{ref: "bobs-ddd444", err: "no job of yours has that id", who: alice},
		{ref: "bobs", err: "no job of yours has that id", who: alice},
		{ref: "nope", err: "no job of yours has that id", who: alice},
		{ref: "bobs", want: "bobs-ddd444", who: root, all: true},
		{ref: "bobs-ddd444", want: "bobs-ddd444", who: bob},
	} {
		s, note, err := x.Resolve(c.ref, c.who, c.all)
		if s.ID != c.want || !strings.Contains(note, c.note) || (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s resolves %q: %s, %q, %v; want %s, %q, %q", c.who.User, c.ref, s.ID, note, err, c.want, c.note, c.err)
		}
	}
}

// TestBuildFromRecords: the records of a store written without the index
// (an older daemon's) get their summaries when a daemon opens it, once.
func TestBuildFromRecords(t *testing.T) {
	st, x := open(t)
	ctx := t.Context()
	if err := x.Put(ctx, job("has-000001", "has", &alice, api.StateSucceeded, 1)); err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"has-000001", "old-000002", "old-000003"} {
		j := api.Job{ID: id, Name: "old", Owner: &alice, Node: "n1", State: api.StateSucceeded, Created: job("", "", nil, "", i).Created,
			Attempts: []api.Attempt{{Attempt: 1, LastStep: 40}}}
		b, _ := json.Marshal(j)
		if _, err := st.Jobs.Put(ctx, id, b); err != nil {
			t.Fatal(err)
		}
	}
	if x.Len() != 1 {
		t.Fatalf("the index has %d jobs before it is opened again, want 1", x.Len())
	}
	y, err := Open(ctx, st.JobIndex, st.Jobs, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if s, ok := y.Get("old-000003"); y.Len() != 3 || !ok || s.Name != "old" || s.LastStep != 40 {
		t.Errorf("after opening: %d jobs, old-000003 %+v; want 3, its summary", y.Len(), s)
	}
	if s, _ := y.Get("has-000001"); s.Name != "has" {
		t.Errorf("a summary written over: %+v", s)
	}
}

// TestKeepAndDelete: a keep mark shows in the job's summary and keeps it
// out of the jobs retention chooses from; deleting a job removes its
// summary and mark.
func TestKeepAndDelete(t *testing.T) {
	_, x := open(t)
	ctx := t.Context()
	for i, id := range []string{"a-000001", "b-000002", "c-000003"} {
		state := api.StateSucceeded
		if i == 2 {
			state = api.StateRunning
		}
		if err := x.Put(ctx, job(id, "j", &alice, state, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Keep(ctx, "a-000001", false); err != nil {
		t.Fatal(err)
	}
	if s, _ := x.Get("a-000001"); !s.Kept {
		t.Errorf("a kept job's summary: %+v", s)
	}
	ended, all := x.Ended("n1")
	if !slices.Equal(ids(ended), []string{"b-000002"}) || all != 3 {
		t.Errorf("ended %v of %d; want b (a is kept, c runs) of 3", ids(ended), all)
	}
	if u := x.Unfinished("n1"); !slices.Equal(ids(u), []string{"c-000003"}) {
		t.Errorf("unfinished %v, want c", ids(u))
	}
	if err := x.Keep(ctx, "a-000001", true); err != nil {
		t.Fatal(err)
	}
	if ended, _ := x.Ended("n1"); len(ended) != 2 {
		t.Errorf("after undo: ended %v, want a and b", ids(ended))
	}
	if err := x.Keep(ctx, "b-000002", false); err != nil {
		t.Fatal(err)
	}
	if err := x.Delete(ctx, "b-000002"); err != nil {
		t.Fatal(err)
	}
	if _, ok := x.Get("b-000002"); ok || x.Len() != 2 {
		t.Errorf("after delete: b still there, or %d jobs", x.Len())
	}
	// A new job of the same id starts unkept, in every view.
	y, err := Open(context.WithoutCancel(ctx), x.kv, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if _, ok := y.Get("b-000002"); ok || y.Len() != 2 {
		t.Errorf("a second view after delete: %d jobs", y.Len())
	}
	if s, _ := y.Get("a-000001"); s.Kept {
		t.Errorf("a second view keeps a: %+v", s)
	}
}
