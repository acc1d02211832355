package api

import "errors"

// Errors of the API. The daemon's answers carry them as text.
var (
	// ErrNoDaemon is returned when no scavd answers at the address tried.
	ErrNoDaemon = errors.New("no scavd reachable")
	// ErrBadRequest marks a request the daemon refused because of its content.
	ErrBadRequest = errors.New("bad request")
	// ErrNoJob is returned for a job id the daemon does not know.
	ErrNoJob = errors.New("no such job")
)
