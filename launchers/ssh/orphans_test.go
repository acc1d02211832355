package ssh

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestJobKillCommand runs the command that stops a previous daemon's
// workers through a local sh, as a host's login shell would: it kills the
// groups of the attempt it names and no other.
func TestJobKillCommand(t *testing.T) {
	start := func(attempt string) *exec.Cmd {
		c := exec.Command("/bin/sh", "-c", "sleep 60 & wait")
		c.Env = append(os.Environ(), "SCAV_JOB_ID=orphan-000001", "SCAV_ATTEMPT="+attempt)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL); _ = c.Wait() })
		return c
	}
	mine, other := start("2"), start("3")
	time.Sleep(100 * time.Millisecond) // the sleeps exist
	out, err := exec.Command("/bin/sh", "-c", jobKillCommand("orphan-000001", 2)).Output()
	if err != nil || strings.TrimSpace(string(out)) == "0" {
		t.Fatalf("%s: %q, %v; want one group killed", jobKillCommand("orphan-000001", 2), out, err)
	}
	if err := mine.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the attempt's group: wait = %v, want killed", err)
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("another attempt's group was killed: %v", err)
	}
}
