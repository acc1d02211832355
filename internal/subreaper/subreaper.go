// Package subreaper makes a test process the reaper of the processes that
// the daemons it starts orphan (sshd sessions, slurmstepd, workers), so that
// tests can reap them and check that nothing is left, even as a zombie, on
// machines whose PID 1 does not reap.
package subreaper

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/internal/procstat"
)

// Become makes this process a child subreaper: orphaned descendants are
// re-parented to it instead of to PID 1.
func Become() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become child subreaper: %w", err)
	}
	return nil
}

// Leave reaps the orphans that have exited and makes this process no
// longer a child subreaper: orphans go to PID 1 again (for a test that
// must not change how the tests after it count their zombies).
func Leave() error {
	ReapOrphans()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("leave child subreaper: %w", err)
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

// Settle reaps this process's exited children, again and again for up to
// d (a process ends a moment after it is killed), and returns the children
// still there then (none: nothing was left).
func Settle(d time.Duration) []string {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		ReapOrphans()
		kids := Children()
		if len(kids) == 0 || time.Now().After(deadline) {
			return kids
		}
	}
}

// Children lists the children of this process, zombies included, as
// "pid (comm) state", so that a test can check that nothing is left.
func Children() []string {
	me := os.Getpid()
	var kids []string
	_ = procstat.Each(func(st procstat.Stat) {
		if st.PPID == me {
			kids = append(kids, fmt.Sprintf("%d (%s) %c", st.PID, st.Name, st.State))
		}
	})
	return kids
}
