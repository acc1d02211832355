package telemetry

import "time"

// LogLine is one line of a worker's output, as published on LogSubject.
type LogLine struct {
	// Attempt is the attempt whose worker wrote the line.
	Attempt int `json:"attempt"`
	// Rank is the worker's rank (the launcher's process index in self-launching mode).
	Rank int `json:"rank"`
	// Stream is "stdout" or "stderr".
	Stream string `json:"stream"`
	// Line is the text, without its newline.
	Line string `json:"line"`
	// Time is when the daemon read the line.
	Time time.Time `json:"t"`
	// N numbers the job's output lines from 1, over all its attempts, so
	// that a reader sees where its history left lines out (0: a line of
	// the daemon's own, or a daemon before numbering).
	N int64 `json:"n,omitempty"`
}

// EventKind names a job lifecycle event.
type EventKind string

// Job lifecycle events, in the order a job meets them.
const (
	// EventSubmitted: the daemon accepted the job.
	EventSubmitted EventKind = "submitted"
	// EventStarted: an attempt's processes exist.
	EventStarted EventKind = "started"
	// EventMoved: an attempt ended to relaunch the job at another
	// configuration (or a relaunch failed and the job went back).
	EventMoved EventKind = "moved"
	// EventDecided: the job's policy decided (Phase and the predictions say more).
	EventDecided EventKind = "decided"
	// EventRestarting: an attempt crashed (a worker failed on its own) and
	// the job restarts from its last complete checkpoint (--max-restarts).
	EventRestarting EventKind = "restarting"
	// EventStopping: a stop was requested; workers got SIGTERM.
	EventStopping EventKind = "stopping"
	// EventStalled: the job's ranks reported no step for its stall
	// timeout (or, after one, report steps again); the message says which.
	EventStalled EventKind = "stalled"
	// EventBadLoss: the job's loss turned NaN or infinite.
	EventBadLoss EventKind = "bad-loss"
	// EventFinished: the job ended; ExitCode is final. Nothing follows it.
	EventFinished EventKind = "finished"
)

// Event is a job lifecycle event, as published on EventSubject.
type Event struct {
	Kind    EventKind `json:"kind"`
	Job     string    `json:"job"`
	Attempt int       `json:"attempt,omitempty"`
	Time    time.Time `json:"t"`
	// ExitCode, State and Handover are set on EventFinished: the job's exit
	// status and final state, and whether the next daemon on the node goes on
	// with it (its daemon stopped it to restart).
	ExitCode *int   `json:"exit_code,omitempty"`
	State    string `json:"state,omitempty"`
	Handover bool   `json:"handover,omitempty"`
	// Message says what happened in words (why a job failed, who stopped it).
	Message string `json:"message,omitempty"`
	// Phase, PredictedS and PredictedUSD come with EventDecided: the policy's
	// phase and its forecast of the time and cost to finish.
	Phase        string  `json:"phase,omitempty"`
	PredictedS   float64 `json:"predicted_s,omitempty"`
	PredictedUSD float64 `json:"predicted_usd,omitempty"`
}
