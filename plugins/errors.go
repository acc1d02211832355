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

	// Errors of the plugin transport and the catalog follow.

	// ErrUnknownHandle reports a handle id the plugin does not know (it was
	// never started there, or the plugin restarted).
	ErrUnknownHandle = errors.New("unknown attempt handle")
	// ErrPluginUnavailable reports that a launcher plugin cannot be reached:
	// its process exited or was closed.
	ErrPluginUnavailable = errors.New("launcher plugin unavailable")
	// ErrPluginChecksum reports a plugin binary whose sha256 is not the one
	// given to goplugin.Load; the binary is not started.
	ErrPluginChecksum = errors.New("launcher plugin checksum mismatch")
	// ErrUnknownLauncher reports a launcher name that no catalog entry has.
	ErrUnknownLauncher = errors.New("unknown launcher")
)
