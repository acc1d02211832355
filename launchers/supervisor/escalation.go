package supervisor

import (
	"context"
	"sync"
	"time"
)

// escalation is how a stop goes from SIGTERM to SIGKILL: SIGTERM when
// stopping begins, SIGKILL when the earliest deadline asked for passes (a
// later Stop with a shorter grace brings it forward). It is owned by Run's
// goroutine and not safe for concurrent use.
type escalation struct {
	timer *time.Timer
	at    time.Time
	begun bool
}

// begin starts stopping, or moves the SIGKILL deadline earlier. It reports
// true on the first call only: the caller then sends SIGTERM.
func (e *escalation) begin(deadline time.Time) (first bool) {
	first = !e.begun
	e.begun = true
	if !e.at.IsZero() && !deadline.Before(e.at) {
		return first
	}
	e.at = deadline
	if e.timer != nil {
		e.timer.Stop()
	}
	e.timer = time.NewTimer(time.Until(deadline))
	return first
}

// stopping reports whether begin has been called.
func (e *escalation) stopping() bool { return e.begun }

// due delivers when the SIGKILL is due; nil when none is pending.
func (e *escalation) due() <-chan time.Time {
	if e.timer == nil {
		return nil
	}
	return e.timer.C
}

// fired records that due delivered: the caller sends SIGKILL, and no other
// deadline is pending.
func (e *escalation) fired() { e.timer = nil }

// close releases the timer.
func (e *escalation) close() {
	if e.timer != nil {
		e.timer.Stop()
	}
}

// stopRequests gathers the Stop calls of an attempt for Run's goroutine:
// the earliest SIGKILL deadline asked for wins, and every call pokes c. Make
// it with newStopRequests; it is safe for concurrent use.
type stopRequests struct {
	mu sync.Mutex
	at time.Time
	c  chan struct{}
}

func newStopRequests() *stopRequests { return &stopRequests{c: make(chan struct{}, 1)} }

// request asks for SIGKILL at most grace from now (at once for grace <= 0)
// and pokes the supervisor; a later deadline than one already asked for
// changes nothing.
func (s *stopRequests) request(grace time.Duration) {
	deadline := time.Now().Add(max(grace, 0))
	s.mu.Lock()
	if s.at.IsZero() || deadline.Before(s.at) {
		s.at = deadline
	}
	s.mu.Unlock()
	select {
	case s.c <- struct{}{}:
	default: // a poke is pending; it reads the earliest deadline
	}
}

// stop is request(grace), then a wait until done (the attempt's end) is
// closed or ctx ends, whose error it returns (the stop goes on).
func (s *stopRequests) stop(ctx context.Context, grace time.Duration, done <-chan struct{}) error {
	s.request(grace)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// deadline is the earliest deadline asked for (zero: none).
func (s *stopRequests) deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at
}
