package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
)

// carol has no jobs.
var carol = api.Owner{UID: 1003, GID: 1003, User: "carol"}

// TestPingAndStatsNameOnlyTheCallersJobs: the running jobs ping and stats
// name are the caller's (root: all), so no user learns another's job ids.
func TestPingAndStatsNameOnlyTheCallersJobs(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct {
		who  api.Owner
		want []string
	}{
		{alice, []string{"alice-1"}},
		{bob, []string{"bob-1"}},
		{carol, []string{}},
		{root, []string{"alice-1", "bob-1", "old-1"}},
	} {
		c := f.as(t, tc.who)
		info, err := c.Ping(t.Context())
		if err != nil || info.Node != "n1" || !slices.Equal(info.Active, tc.want) {
			t.Errorf("%s: ping %+v, %v; want active %v", tc.who.User, info, err, tc.want)
		}
		st, err := c.Stats(t.Context())
		if err != nil || !slices.Equal(st.Info.Active, tc.want) || st.Ingest.Accepted != 7 {
			t.Errorf("%s: stats %+v, %v; want active %v", tc.who.User, st, err, tc.want)
		}
	}
}

// TestRunOwnsTheJobByItsCaller: a job is its caller's; a daemon that is not
// root runs only its own user's.
func TestRunOwnsTheJobByItsCaller(t *testing.T) {
	f := newFixture(t, nil)
	j, err := f.as(t, alice).Run(t.Context(), api.RunRequest{Name: "train", Command: []string{"true"}})
	if err != nil || j.Owner == nil || j.Owner.UID != alice.UID {
		t.Fatalf("run: %+v, %v; want a job of alice", j, err)
	}
	if code, rep := f.call(t, alice, api.VerbRun, []byte("{")); code != http.StatusBadRequest || !strings.Contains(rep.Error, "decode run request") {
		t.Errorf("a malformed run: %d %q", code, rep.Error)
	}

	user := newFixture(t, nil)
	user.srv.self = alice // before its listeners start: a daemon that alice runs
	run := api.RunRequest{Name: "x", Command: []string{"true"}}
	if code, rep := user.call(t, bob, api.VerbRun, run); code != http.StatusForbidden ||
		!strings.Contains(rep.Error, "this scavd runs as alice and runs only alice's jobs") {
		t.Errorf("bob's run on alice's daemon: %d %q", code, rep.Error)
	}
	if got := user.jobs.asked(); len(got) != 0 {
		t.Errorf("the registry was asked %v for a refused run", got)
	}
	if code, rep := user.call(t, alice, api.VerbRun, run); code != http.StatusOK {
		t.Errorf("alice's run on her daemon: %d %q", code, rep.Error)
	}
}

// TestActingOnAJob: stop, resume, move and job act on (read) a job of
// their caller's, or any as root; another's is refused before the registry
// is asked; an unknown job and a malformed request are told apart.
func TestActingOnAJob(t *testing.T) {
	for verb, req := range map[string]func(id string) any{
		api.VerbStop:   func(id string) any { return api.StopRequest{Job: id} },
		api.VerbResume: func(id string) any { return api.ResumeRequest{Job: id} },
		api.VerbMove:   func(id string) any { return api.MoveRequest{Job: id, Config: plugins.Config{Workers: 2}} },
		api.VerbJob:    func(id string) any { return api.JobRequest{Job: id} },
	} {
		t.Run(verb, func(t *testing.T) {
			f := newFixture(t, nil)
			what, call := verb, verb // how refusals name it; what the registry is asked
			switch verb {
			case api.VerbJob:
				what, call = "read", ""
			case api.VerbMove:
				call = "move requested"
			}
			for _, tc := range []struct {
				who       api.Owner
				job, want string
				code      int
			}{
				{who: alice, job: "alice-1", code: http.StatusOK},
				{who: root, job: "bob-1", code: http.StatusOK},
				{who: alice, job: "bob-1", code: http.StatusForbidden, want: "permission denied: " + what + " job bob-1: it is bob's; only they or root may"},
				{who: bob, job: "old-1", code: http.StatusForbidden, want: "it is root's"},
				{who: alice, job: "nope-1", code: http.StatusNotFound, want: "no such job"},
			} {
				code, rep := f.call(t, tc.who, verb, req(tc.job))
				if code != tc.code || !strings.Contains(rep.Error, tc.want) {
					t.Errorf("%s on %s: %d %q; want %d %q", tc.who.User, tc.job, code, rep.Error, tc.code, tc.want)
				}
				var want []string
				if code == http.StatusOK && call != "" {
					want = []string{"n1 " + call + " " + tc.job}
				}
				if got := f.jobs.asked(); !slices.Equal(got, want) {
					t.Errorf("%s on %s: the registry was asked %v, want %v", tc.who.User, tc.job, got, want)
				}
				var j api.Job
				if code == http.StatusOK && (json.Unmarshal(rep.Data, &j) != nil || j.ID != tc.job) {
					t.Errorf("%s on %s: answered %s", tc.who.User, tc.job, rep.Data)
				}
			}
			if code, rep := f.call(t, alice, verb, []byte(`{"job": 5}`)); code != http.StatusBadRequest || !strings.Contains(rep.Error, "decode "+verb+" request") {
				t.Errorf("a malformed request: %d %q", code, rep.Error)
			}
		})
	}
}

// TestJobsListsTheCallersJobs: jobs lists the caller's own jobs (root's:
// those of no owner too); every user's only for root.
func TestJobsListsTheCallersJobs(t *testing.T) {
	f := newFixture(t, nil)
	ids := func(js []api.Job) []string {
		out := []string{}
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	for _, tc := range []struct {
		who  api.Owner
		want []string
	}{
		{alice, []string{"alice-1", "alice-2"}},
		{bob, []string{"bob-1"}},
		{carol, []string{}},
		{root, []string{"old-1"}},
	} {
		js, err := f.as(t, tc.who).Jobs(t.Context())
		if err != nil || !slices.Equal(ids(js), tc.want) {
			t.Errorf("%s: jobs %v, %v; want %v", tc.who.User, ids(js), err, tc.want)
		}
	}
	if js, err := f.as(t, root).AllJobs(t.Context()); err != nil || !slices.Equal(ids(js), []string{"alice-1", "alice-2", "bob-1", "old-1"}) {
		t.Errorf("root: every job %v, %v", ids(js), err)
	}
	if code, rep := f.call(t, alice, api.VerbJobs, api.JobsRequest{All: true}); code != http.StatusForbidden || !strings.Contains(rep.Error, "only root lists every user's jobs") {
		t.Errorf("alice asks for every job: %d %q", code, rep.Error)
	}
	if code, rep := f.call(t, alice, api.VerbJobs, []byte(" ")); code != http.StatusOK {
		t.Errorf("jobs without a body: %d %q", code, rep.Error)
	}
	if code, rep := f.call(t, alice, api.VerbJobs, []byte("[")); code != http.StatusBadRequest {
		t.Errorf("a malformed jobs request: %d %q", code, rep.Error)
	}
}

// TestAllocations: only root (the scheduler's hooks) or the daemon's own
// user reports allocations, each a begin or an end; a user lists their
// own, root all.
func TestAllocations(t *testing.T) {
	f := newFixture(t, nil)
	report := func(who api.Owner, event string, uid int) (int, string) {
		code, rep := f.call(t, who, api.VerbAllocation, api.AllocationEvent{Event: event,
			Allocation: api.Allocation{Scheduler: "slurm", ID: "4711", UID: uid, Node: "n1"}})
		return code, rep.Error
	}
	if code, msg := report(alice, api.AllocationBegin, int(alice.UID)); code != http.StatusForbidden || !strings.Contains(msg, "only root (the scheduler's hooks) reports allocations") {
		t.Errorf("alice reports an allocation: %d %q", code, msg)
	}
	if code, msg := report(root, "middle", 0); code != http.StatusBadRequest || !strings.Contains(msg, `allocation event "middle": use "begin" or "end"`) {
		t.Errorf("an unknown event: %d %q", code, msg)
	}
	if code, rep := f.call(t, root, api.VerbAllocation, []byte("{")); code != http.StatusBadRequest {
		t.Errorf("a malformed report: %d %q", code, rep.Error)
	}
	for _, uid := range []uint32{alice.UID, bob.UID} {
		if code, msg := report(root, api.AllocationBegin, int(uid)); code != http.StatusOK {
			t.Fatalf("root reports: %d %q", code, msg)
		}
	}
	for _, tc := range []struct {
		who  api.Owner
		want []int
	}{{alice, []int{1001}}, {bob, []int{1002}}, {carol, []int{}}, {root, []int{1001, 1002}}} {
		as, err := f.as(t, tc.who).Allocations(t.Context())
		got := []int{}
		for _, a := range as {
			got = append(got, a.UID)
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s lists the allocations of %v (%v); want %v", tc.who.User, got, err, tc.want)
		}
	}

	user := newFixture(t, nil)
	user.srv.self = alice // before its listeners start: a daemon that alice runs
	if code, rep := user.call(t, alice, api.VerbAllocation, api.AllocationEvent{Event: api.AllocationEnd}); code != http.StatusOK {
		t.Errorf("alice reports to her own daemon: %d %q", code, rep.Error)
	}
}

// TestVerbsHaveTheirTimeout: the registry is asked with the verb's time
// limit (api.Timeout): a move waits for a checkpoint, the others do not.
func TestVerbsHaveTheirTimeout(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct {
		verb     string
		req      any
		min, max time.Duration
	}{
		{api.VerbJob, api.JobRequest{Job: "alice-1"}, 0, api.Timeout(api.VerbJob)},
		{api.VerbMove, api.MoveRequest{Job: "alice-1"}, api.Timeout(api.VerbJob), api.Timeout(api.VerbMove)},
	} {
		if code, rep := f.call(t, alice, tc.verb, tc.req); code != http.StatusOK {
			t.Fatalf("%s: %d %q", tc.verb, code, rep.Error)
		}
		f.jobs.mu.Lock()
		d := f.jobs.deadline
		f.jobs.mu.Unlock()
		if d <= tc.min || d > tc.max {
			t.Errorf("%s: the registry had %s left, want (%s, %s]", tc.verb, d, tc.min, tc.max)
		}
	}
}

// TestOffers: any identified caller reads what the launcher offers now; a
// launcher that fails says so; a daemon without offers answers none.
func TestOffers(t *testing.T) {
	offers := api.Offers{Launcher: "cloudvm", MaxWorkers: 8, Offers: []plugins.Offer{{Type: "loc.half", Slots: 1, OnDemandUSD: 0.1, SpotUSD: 0.04, MinimumBillS: 60}}}
	fail := false
	f := newFixture(t, func(o *Options) {
		o.Offers = func(context.Context) (api.Offers, error) {
			if fail {
				return api.Offers{}, errors.New("provider down")
			}
			return offers, nil
		}
	})
	for _, who := range []api.Owner{alice, root} {
		got, err := f.as(t, who).Offers(t.Context())
		if err != nil || got.Launcher != "cloudvm" || len(got.Offers) != 1 || got.Offers[0] != offers.Offers[0] {
			t.Errorf("%s: offers %+v, %v", who.User, got, err)
		}
	}
	fail = true
	if _, err := f.as(t, alice).Offers(t.Context()); err == nil || !strings.Contains(err.Error(), "provider down") {
		t.Errorf("a failing launcher: %v", err)
	}
	if got, err := newFixture(t, nil).as(t, bob).Offers(t.Context()); err != nil || len(got.Offers) != 0 {
		t.Errorf("no offers: %+v, %v", got, err)
	}
}

// TestListResolveKeep: a page of the job index, a job named by name or id
// prefix, and a keep mark are the caller's own jobs' (every user's for
// root, when asked); another user's job named by its id is refused as a
// read of it is, and by its name or a prefix is no job of the user's.
func TestListResolveKeep(t *testing.T) {
	f := newFixture(t, nil)
	ctx := t.Context()
	a, r := f.as(t, alice), f.as(t, root)
	if p, err := a.List(ctx, api.JobsRequest{Limit: 1}); err != nil || len(p.Jobs) != 1 || p.Jobs[0].ID != "alice-2" || p.More != 1 || p.Before != "alice-2" {
		t.Errorf("alice's newest job: %+v, %v", p, err)
	}
	if p, err := a.List(ctx, api.JobsRequest{Records: true}); err != nil || len(p.Records) != 2 || p.Jobs != nil || p.Records[0].ID != "alice-1" {
		t.Errorf("alice's records: %+v, %v", p, err)
	}
	if _, err := a.List(ctx, api.JobsRequest{All: true}); err == nil || !strings.Contains(err.Error(), "only root lists every user's jobs") {
		t.Errorf("alice lists every job: %v", err)
	}
	if p, err := r.List(ctx, api.JobsRequest{All: true, User: "bob"}); err != nil || len(p.Jobs) != 1 || p.Jobs[0].ID != "bob-1" {
		t.Errorf("root lists bob's: %+v, %v", p, err)
	}
	for _, c := range []struct {
		who       api.Owner
		ref, want string
		all       bool
		err       string
	}{
		{who: alice, ref: "alice-1", want: "alice-1"},
		{who: alice, ref: "alice", err: "2 jobs' ids start with it"},
		{who: alice, ref: "bob-1", err: "permission denied: read job bob-1: it is bob's"}, // an id names it, refused as a read is
		{who: alice, ref: "bob", err: "no job of yours has that id"},
		{who: alice, ref: "bob-1", all: true, err: "only root names every user's jobs"},
		{who: root, ref: "bob", all: true, want: "bob-1"},
		{who: root, ref: "bob", err: "no job of yours has that id"},
	} {
		res, err := f.as(t, c.who).Resolve(ctx, c.ref, c.all)
		if res.Job.ID != c.want || (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s resolves %q: %s, %v; want %s, %q", c.who.User, c.ref, res.Job.ID, err, c.want, c.err)
		}
	}
	if s, err := a.Keep(ctx, "alice-1", false); err != nil || !s.Kept {
		t.Errorf("alice keeps alice-1: %+v, %v", s, err)
	}
	if _, err := a.Keep(ctx, "bob-1", false); err == nil || !strings.Contains(err.Error(), "it is bob's") {
		t.Errorf("alice keeps bob-1: %v", err)
	}
	if s, err := r.Keep(ctx, "alice-1", true); err != nil || s.Kept {
		t.Errorf("root unkeeps alice-1: %+v, %v", s, err)
	}
}
