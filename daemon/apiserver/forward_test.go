package apiserver

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
)

// TestRequestsGoToTheJobsNode: a stop, resume or move of a job of another
// node is forwarded to that node's daemon, for a caller the asking daemon
// checked; the job's daemon checks the caller again.
func TestRequestsGoToTheJobsNode(t *testing.T) {
	f := newFixture(t, nil)
	f.serve(t, "n2", nil)
	f.jobs.add("carol-1", "n3", &carol) // a node whose daemon is away

	for _, tc := range []struct {
		who       api.Owner
		verb      string
		req       any
		code      int
		want      string
		forwarded []string
	}{
		{who: alice, verb: api.VerbStop, req: api.StopRequest{Job: "alice-2"}, code: http.StatusOK, forwarded: []string{"n2 stop alice-2"}},
		{who: root, verb: api.VerbResume, req: api.ResumeRequest{Job: "alice-2"}, code: http.StatusOK, forwarded: []string{"n2 resume alice-2"}},
		{who: alice, verb: api.VerbMove, req: api.MoveRequest{Job: "alice-2", Reason: "cheaper"}, code: http.StatusOK, forwarded: []string{"n2 move cheaper alice-2"}},
		{who: bob, verb: api.VerbStop, req: api.StopRequest{Job: "alice-2"}, code: http.StatusForbidden, want: "it is alice's"},
		{who: carol, verb: api.VerbStop, req: api.StopRequest{Job: "carol-1"}, code: http.StatusInternalServerError, want: "the job runs on node n3, whose scavd does not answer"},
	} {
		code, rep := f.call(t, tc.who, tc.verb, tc.req)
		if code != tc.code || !strings.Contains(rep.Error, tc.want) {
			t.Errorf("%s %s: %d %q; want %d %q", tc.who.User, tc.verb, code, rep.Error, tc.code, tc.want)
		}
		if got := f.jobs.asked(); !slices.Equal(got, tc.forwarded) {
			t.Errorf("%s %s: the registries were asked %v, want %v", tc.who.User, tc.verb, got, tc.forwarded)
		}
	}

	// What only daemons can send (NATS is theirs): the job's daemon still
	// checks the caller, and answers a malformed or unknown request.
	ask := func(subject string, data []byte) api.Reply {
		t.Helper()
		m, err := f.nc.Request(subject, data, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep api.Reply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	body, _ := json.Marshal(api.StopRequest{Job: "alice-2"})
	forged, _ := json.Marshal(forwarded{Caller: bob, Body: body})
	for _, tc := range []struct {
		name, subject string
		data          []byte
		want          string
	}{
		{"another's job", forwardPrefix + "n2." + api.VerbStop, forged, "permission denied: stop job alice-2: it is alice's"},
		{"unknown verb", forwardPrefix + "n2.nope", forged, `no verb "nope"`},
		{"malformed", forwardPrefix + "n2." + api.VerbStop, []byte("{"), "decode forwarded stop"},
	} {
		if rep := ask(tc.subject, tc.data); !strings.Contains(rep.Error, tc.want) {
			t.Errorf("%s: answered %q, want %q", tc.name, rep.Error, tc.want)
		}
	}
	if got := f.jobs.asked(); len(got) != 0 {
		t.Errorf("the registries were asked %v for refused requests", got)
	}
}
