package plugins

import (
	"testing"
	"time"
)

func TestEscalation(t *testing.T) {
	var e Escalation
	if e.Stopping() || e.Due() != nil {
		t.Fatal("a fresh escalation is stopping or has a deadline")
	}
	if !e.Begin(time.Now().Add(time.Hour)) {
		t.Fatal("the first Begin did not report first")
	}
	if e.Begin(time.Now().Add(2*time.Hour)) || !e.Stopping() {
		t.Fatal("a second Begin reported first, or stopping was forgotten")
	}
	// A later deadline changes nothing; an earlier one brings the SIGKILL forward.
	select {
	case <-e.Due():
		t.Fatal("the SIGKILL came before its deadline")
	case <-time.After(20 * time.Millisecond):
	}
	e.Begin(time.Now().Add(10 * time.Millisecond))
	select {
	case <-e.Due():
		e.Fired()
	case <-time.After(5 * time.Second):
		t.Fatal("an earlier deadline did not bring the SIGKILL forward")
	}
	if e.Due() != nil {
		t.Fatal("a deadline is still pending after it fired")
	}
	e.Close()
}

func TestStopRequestsKeepTheEarliestDeadline(t *testing.T) {
	s := NewStopRequests()
	if !s.Deadline().IsZero() {
		t.Fatal("a deadline before any request")
	}
	s.Request(time.Hour)
	first := s.Deadline()
	s.Request(2 * time.Hour) // later: changes nothing
	if got := s.Deadline(); !got.Equal(first) {
		t.Errorf("a later request moved the deadline from %v to %v", first, got)
	}
	s.Request(-time.Second) // at once
	if got := s.Deadline(); !got.Before(first) || time.Until(got) > 0 {
		t.Errorf("deadline %v after a request for now", got)
	}
	select { // three requests, one pending poke
	case <-s.C():
	default:
		t.Fatal("no poke")
	}
	select {
	case <-s.C():
		t.Fatal("a second poke for requests nobody had read")
	default:
	}
}
