package plugins

import "errors"

// Sentinel errors of the launcher contract. Launchers wrap them with %w and
// the operation and key, so callers test them with errors.Is.
var (
	// ErrInvalidSpec reports an AttemptSpec that fails Validate; the wrapped
	// error lists every problem found.
	ErrInvalidSpec = errors.New("invalid attempt spec")
	// ErrUnsupported reports a request that is valid but that this launcher
	// cannot honour (for example more than one node on the local launcher).
	ErrUnsupported = errors.New("not supported by this launcher")
	// ErrStopped reports an operation on an attempt that is being stopped.
	ErrStopped = errors.New("attempt stopped")
	// ErrFinished reports an operation on an attempt whose processes have all ended.
	ErrFinished = errors.New("attempt finished")
)
