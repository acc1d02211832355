package plugins

import (
	"context"
	"sync"
	"time"
)

// Escalation is how a launcher stops an attempt's processes: SIGTERM when
// stopping begins, SIGKILL when the earliest deadline asked for passes (a
// later Stop with a shorter grace brings it forward). It is owned by the
// attempt's supervising goroutine and not safe for concurrent use.
type Escalation struct {
	timer *time.Timer
	at    time.Time
	begun bool
}

// Begin starts stopping, or moves the SIGKILL deadline earlier. It reports
// true on the first call only: the caller then sends SIGTERM.
func (e *Escalation) Begin(deadline time.Time) (first bool) {
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

// Stopping reports whether Begin has been called.
func (e *Escalation) Stopping() bool { return e.begun }

// Due delivers when the SIGKILL is due; nil when none is pending.
func (e *Escalation) Due() <-chan time.Time {
	if e.timer == nil {
		return nil
	}
	return e.timer.C
}

// Fired records that Due delivered: the caller sends SIGKILL, and no other
// deadline is pending.
func (e *Escalation) Fired() { e.timer = nil }

// Close releases the timer.
func (e *Escalation) Close() {
	if e.timer != nil {
		e.timer.Stop()
	}
}

// StopRequests gathers the Stop calls of an attempt for its supervising
// goroutine: the earliest SIGKILL deadline asked for wins, and every call
// pokes C. Make it with NewStopRequests; it is safe for concurrent use.
type StopRequests struct {
	mu sync.Mutex
	at time.Time
	c  chan struct{}
}

// NewStopRequests returns an empty StopRequests.
func NewStopRequests() *StopRequests { return &StopRequests{c: make(chan struct{}, 1)} }

// Request asks for SIGKILL at most grace from now (at once for grace <= 0)
// and pokes the supervisor; a later deadline than one already asked for
// changes nothing.
func (s *StopRequests) Request(grace time.Duration) {
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

// Stop is Handle.Stop's common part: Request(grace), then wait until done
// (the attempt's end) is closed or ctx ends, whose error it returns (the
// stop goes on).
func (s *StopRequests) Stop(ctx context.Context, grace time.Duration, done <-chan struct{}) error {
	s.Request(grace)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// C is poked after each Request.
func (s *StopRequests) C() <-chan struct{} { return s.c }

// Deadline is the earliest deadline asked for (zero: none).
func (s *StopRequests) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at
}
