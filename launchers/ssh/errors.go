package ssh

import "errors"

// Errors of the SSH launcher. They are wrapped with the operation and the
// host they concern; test them with errors.Is.
var (
	// ErrHostUnreachable reports a host that could not be dialled (Start
	// returns it). A host whose connection died or stopped answering
	// keepalives during an attempt is named in Result.LostHosts instead;
	// the launcher logs this error with it.
	ErrHostUnreachable = errors.New("host unreachable")
	// ErrInventory reports a malformed host inventory line or flag value.
	ErrInventory = errors.New("invalid host inventory")
)
