package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
)

// StopOrphaned kills what is left of an attempt that a previous daemon
// started and lost (this launcher cannot reattach to its processes: their
// output pipes ended with that daemon). The attempt's processes are the
// members of process group spec.HandleID whose environment names the job
// and attempt (SCAV_JOB_ID, SCAV_ATTEMPT), so a reused group id never hits
// another program, and every process of the attempt's cgroup (cgroup.go). It returns how many processes it killed, and an error
// when one could not be killed.
func (l *Launcher) StopOrphaned(_ context.Context, spec plugins.RecoverSpec) (int, error) {
	pgid, err := strconv.Atoi(spec.HandleID)
	if err != nil || pgid <= 1 {
		return 0, fmt.Errorf("stop orphans of job %s attempt %d: handle %q is not a process group id: %w", spec.JobID, spec.Attempt, spec.HandleID, plugins.ErrUnknownHandle)
	}
	members, err := groupMembers(pgid)
	if err != nil {
		return 0, fmt.Errorf("stop orphans of job %s attempt %d: %w", spec.JobID, spec.Attempt, err)
	}
	want := [][]byte{
		[]byte(plugins.EnvJobID + "=" + spec.JobID),
		[]byte(plugins.EnvAttempt + "=" + strconv.Itoa(spec.Attempt)),
	}
	n, killed := 0, map[int]bool{}
	var failed error
	for _, m := range members {
		if m.State == 'Z' || !environHas(m.PID, want) {
			continue
		}
		switch err := syscall.Kill(m.PID, syscall.SIGKILL); {
		case err == nil:
			n, killed[m.PID] = n+1, true
		case !errors.Is(err, syscall.ESRCH):
			failed = fmt.Errorf("stop orphans of job %s attempt %d: kill %d: %w", spec.JobID, spec.Attempt, m.PID, err)
		}
	}
	// What left the group is in the attempt's cgroup, when it had one.
	for _, cg := range existingCgroups(spec.JobID, spec.Attempt) {
		for _, pid := range cg.pids() {
			if !killed[pid] {
				n++
			}
		}
		cg.kill()
		for deadline := time.Now().Add(groupGoneTimeout); cg.populated() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if err := cg.remove(); err != nil && failed == nil {
			failed = fmt.Errorf("stop orphans of job %s attempt %d: %w", spec.JobID, spec.Attempt, err)
		}
	}
	if n > 0 {
		l.logger.Warn("killed the leftover workers of a lost attempt", zap.String("job", spec.JobID), zap.Int("attempt", spec.Attempt), zap.Int("processes", n))
	}
	return n, failed
}

// environHas reports whether every entry of want is a variable of pid's environment.
func environHas(pid int, want [][]byte) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	vars := bytes.Split(b, []byte{0})
	for _, w := range want {
		found := false
		for _, v := range vars {
			if bytes.Equal(v, w) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
