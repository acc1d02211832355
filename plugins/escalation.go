package plugins

import "time"

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
