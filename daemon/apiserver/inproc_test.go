package apiserver

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
)

// TestInProcessClientCallsAsItsUser: As(who) reads and acts as who, under
// the API's rules, and a refusal keeps its status (403, 404).
func TestInProcessClientCallsAsItsUser(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	c := f.srv.As(alice)
	if f.srv.As(alice) != c {
		t.Error("a second client for the same user")
	}
	jobs, err := c.Jobs(ctx)
	if err != nil || len(jobs) != 2 || jobs[0].ID != "alice-1" || jobs[1].ID != "alice-2" {
		t.Fatalf("alice's jobs: %v %v", jobs, err)
	}
	if _, err := c.Job(ctx, "bob-1"); api.RefusalStatus(err) != http.StatusForbidden || !strings.Contains(err.Error(), "it is bob's") {
		t.Errorf("alice reads bob's job: %v (status %d), want 403", err, api.RefusalStatus(err))
	}
	if _, err := c.Stop(ctx, "bob-1", 0); api.RefusalStatus(err) != http.StatusForbidden {
		t.Errorf("alice stops bob's job: %v, want 403", err)
	}
	if _, err := c.Job(ctx, "nope-1"); api.RefusalStatus(err) != http.StatusNotFound {
		t.Errorf("no such job: %v, want 404", err)
	}
	if _, err := c.AllJobs(ctx); api.RefusalStatus(err) != http.StatusForbidden {
		t.Errorf("alice lists everyone's: %v, want 403", err)
	}
	// Its streams are alice's too.
	err = c.Steps(ctx, "bob-1", false, nil)
	if api.RefusalStatus(err) != http.StatusForbidden {
		t.Errorf("alice's steps of bob's job: %v, want 403", err)
	}
	if all, err := f.srv.As(root).AllJobs(ctx); err != nil || len(all) != 4 {
		t.Errorf("root's jobs: %d %v", len(all), err)
	}
	if f.srv.Self().UID != root.UID {
		t.Errorf("Self %+v", f.srv.Self())
	}

	// Once the server closes, the client has nobody to call.
	f.srv.Close(ctx)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.Jobs(cctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("after Close: %v, want a prompt error", err)
	}
}

// ui is a dashboard that hands out fixed links.
type ui struct{ asked []string }

func (u *ui) Handler(func(string) (api.Owner, error), bool) http.Handler {
	return http.NotFoundHandler()
}
func (u *ui) Link(_ context.Context, who api.Owner) (api.DashboardLink, error) {
	u.asked = append(u.asked, who.User)
	return api.DashboardLink{URL: "http://127.0.0.1:1/ui/login?t=x"}, nil
}

// TestDashboardLinkIsTheCallers: the dashboard verb asks the dashboard for
// a link bound to the caller; without a dashboard it says so.
func TestDashboardLinkIsTheCallers(t *testing.T) {
	d := &ui{}
	f := newFixture(t, func(o *Options) { o.UI = d })
	code, rep := f.call(t, bob, api.VerbDashboard, struct{}{})
	if code != http.StatusOK || !strings.Contains(string(rep.Data), "/ui/login?t=x") || len(d.asked) != 1 || d.asked[0] != "bob" {
		t.Errorf("bob's link: %d %s %q; asked for %v", code, rep.Data, rep.Error, d.asked)
	}
	f = newFixture(t, nil)
	if code, rep := f.call(t, bob, api.VerbDashboard, struct{}{}); code != http.StatusBadRequest || !strings.Contains(rep.Error, "serves no dashboard") {
		t.Errorf("no dashboard: %d %q", code, rep.Error)
	}
}
