// Package testproc starts the processes of tests (scavd, scavctl, shells)
// so that none outlives its test.
package testproc

import (
	"os/exec"
	"testing"
)

// Start starts cmd; when t ends, a process not yet waited for is killed
// and waited for (so that it leaves no zombie).
func Start(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
}
