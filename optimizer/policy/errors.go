package policy

import "errors"

// Sentinel errors returned (wrapped) by the policies.
var (
	// ErrUnknownPolicy means no policy has the requested name.
	ErrUnknownPolicy = errors.New("unknown policy")
	// ErrBadSpec means the job specification is unusable.
	ErrBadSpec = errors.New("bad job spec")
	// ErrBadObservation means telemetry is inconsistent (unknown config,
	// non-positive step time, ...).
	ErrBadObservation = errors.New("bad observation")
	// ErrNotObserved means a re-choice was asked for before the first
	// report: there is nothing to decide on.
	ErrNotObserved = errors.New("no report yet")
	// ErrNoStoredModel means the none policy was given no stored model.
	ErrNoStoredModel = errors.New("no stored model")
)
