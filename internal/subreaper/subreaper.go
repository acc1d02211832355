// Package subreaper makes a test process the reaper of the processes that
// the daemons it starts orphan (sshd sessions, slurmstepd, workers), so that
// tests can reap them and check that nothing is left, even as a zombie, on
// machines whose PID 1 does not reap.
package subreaper

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Become makes this process a child subreaper: orphaned descendants are
// re-parented to it instead of to PID 1.
func Become() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become child subreaper: %w", err)
	}
	return nil
}

// ReapOrphans reaps every exited child of this process without blocking.
func ReapOrphans() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}
