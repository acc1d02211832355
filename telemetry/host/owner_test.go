package host

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/internal/testuser"
)

// TestAnotherUsersProcessIsNotTakenForAJob: issue 20's attribution attack.
// Mallory starts a process whose environment names bob's job (SCAV_JOB_ID);
// it is not counted in bob's job's figures. Bob's own process naming it
// is.
func TestAnotherUsersProcessIsNotTakenForAJob(t *testing.T) {
	mallory, bob := testuser.Add(t, "m"), testuser.Add(t, "b")
	start := func(u testuser.User) int {
		cmd := u.Command("/", []string{JobEnv + "=bobs-1a2b3c"}, "sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		})
		// setpriv execs sleep in place: the pid is sleep's once it has.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if b, err := exec.Command("ps", "-o", "comm=", "-p", strconv.Itoa(cmd.Process.Pid)).Output(); err == nil && strings.TrimSpace(string(b)) == "sleep" {
				break
			}
		}
		return cmd.Process.Pid
	}
	mine, his := start(mallory), start(bob)
	c := New()
	c.Owner = func(job string) (uint32, bool) { return uint32(bob.UID), job == "bobs-1a2b3c" }
	_, owners := sampleTwice(t, c, Jobs{"bobs-1a2b3c": nil})
	if owners[mine] != "" {
		t.Errorf("mallory's process (pid %d) is counted in bob's job", mine)
	}
	if owners[his] != "bobs-1a2b3c" {
		t.Errorf("bob's own process (pid %d) is not counted in his job: %q", his, owners[his])
	}
}
