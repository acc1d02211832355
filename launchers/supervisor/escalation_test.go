package supervisor

import (
	"testing"
	"time"
)

func TestEscalation(t *testing.T) {
	var e escalation
	if e.stopping() || e.due() != nil {
		t.Fatal("a fresh escalation is stopping or has a deadline")
	}
	if !e.begin(time.Now().Add(time.Hour)) {
		t.Fatal("the first begin did not report first")
	}
	if e.begin(time.Now().Add(2*time.Hour)) || !e.stopping() {
		t.Fatal("a second begin reported first, or stopping was forgotten")
	}
	// A later deadline changes nothing; an earlier one brings the SIGKILL forward.
	select {
	case <-e.due():
		t.Fatal("the SIGKILL came before its deadline")
	case <-time.After(20 * time.Millisecond):
	}
	e.begin(time.Now().Add(10 * time.Millisecond))
	select {
	case <-e.due():
		e.fired()
	case <-time.After(5 * time.Second):
		t.Fatal("an earlier deadline did not bring the SIGKILL forward")
	}
	if e.due() != nil {
		t.Fatal("a deadline is still pending after it fired")
	}
	e.close()
}

func TestStopRequestsKeepTheEarliestDeadline(t *testing.T) {
	s := newStopRequests()
	if !s.deadline().IsZero() {
		t.Fatal("a deadline before any request")
	}
	s.request(time.Hour)
	first := s.deadline()
	s.request(2 * time.Hour) // later: changes nothing
	if got := s.deadline(); !got.Equal(first) {
		t.Errorf("a later request moved the deadline from %v to %v", first, got)
	}
	s.request(-time.Second) // at once
	if got := s.deadline(); !got.Before(first) || time.Until(got) > 0 {
		t.Errorf("deadline %v after a request for now", got)
	}
	select { // three requests, one pending poke
	case <-s.c:
	default:
		t.Fatal("no poke")
	}
	select {
	case <-s.c:
		t.Fatal("a second poke for requests nobody had read")
	default:
	}
}
