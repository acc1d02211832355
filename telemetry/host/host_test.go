package host

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// startTree starts `sh` with a busy child (a shell loop) and an idle one
// (sleep), in a process group of their own that the test's cleanup kills.
// It returns sh's PID and its children's once both exist.
func startTree(t *testing.T, env ...string) (int, []int) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `sh -c 'while :; do :; done' & sleep 60 & wait`)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/" + strconv.Itoa(cmd.Process.Pid) + "/children")
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(string(b)); len(f) == 2 {
			kids := make([]int, 2)
			for i, s := range f {
				kids[i], _ = strconv.Atoi(s)
			}
			return cmd.Process.Pid, kids
		}
	}
	t.Fatal("the shell's two children did not appear within 5s")
	return 0, nil
}

// sampleTwice samples, lets the busy child run, and samples again (CPU rates need two).
func sampleTwice(t *testing.T, c *Collector, jobs Jobs) (telemetry.HostStat, map[int]string) {
	t.Helper()
	if _, _, err := c.Sample(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	h, owners, err := c.Sample(context.Background(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	return h, owners
}

func jobUsage(h telemetry.HostStat, id string) *telemetry.JobUsage {
	for i := range h.Jobs {
		if h.Jobs[i].Job == id {
			return &h.Jobs[i]
		}
	}
	return nil
}

func TestProcessTreeIsAttributedToItsJob(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   []string
		roots bool
	}{
		{"by root pid", nil, true},
		{"by SCAV_JOB_ID", []string{JobEnv + "=tree-1a2b3c"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh, kids := startTree(t, tc.env...)
			jobs := Jobs{"tree-1a2b3c": nil, "other-000000": nil}
			if tc.roots {
				jobs["tree-1a2b3c"] = []int{sh}
			}
			c := New()
			h, owners := sampleTwice(t, c, jobs)
			for _, pid := range append([]int{sh}, kids...) {
				if owners[pid] != "tree-1a2b3c" {
					t.Errorf("pid %d belongs to %q, want tree-1a2b3c", pid, owners[pid])
				}
			}
			if j := owners[os.Getpid()]; j != "" {
				t.Errorf("the test itself was given to %s", j)
			}
			u := jobUsage(h, "tree-1a2b3c")
			if u == nil || len(u.Processes) != 3 {
				t.Fatalf("job usage %+v, want 3 processes", u)
			}
			if jobUsage(h, "other-000000") != nil {
				t.Error("a job without processes has usage")
			}
			// The busy loop uses CPU; sh and sleep next to none. The
			// machine is shared, so only ask for a tenth of a core.
			if u.CPUCores == nil || *u.CPUCores < 0.1 || u.RSSBytes == 0 || u.CPUSeconds <= 0 {
				t.Errorf("job usage: cores %v, rss %d, cpu %v s", u.CPUCores, u.RSSBytes, u.CPUSeconds)
			}
			var busy float64
			for _, p := range u.Processes {
				if p.PID == kids[0] || p.PID == kids[1] {
					if p.PPID != sh {
						t.Errorf("pid %d: ppid %d, want %d", p.PID, p.PPID, sh)
					}
					if p.CPUCores != nil {
						busy = max(busy, *p.CPUCores)
					}
				}
			}
			if busy < 0.1 {
				t.Errorf("no child used a tenth of a core: %+v", u.Processes)
			}
		})
	}
}

func TestHostReading(t *testing.T) {
	c := New()
	h, owners := sampleTwice(t, c, nil)
	if h.CPUs < 1 || h.MemoryTotalBytes == 0 || h.MemoryUsedBytes == 0 || h.MemoryUsedBytes > h.MemoryTotalBytes || h.CPUUtilization == nil ||
		*h.CPUUtilization < 0 || *h.CPUUtilization > 1 || len(owners) != 0 || h.Jobs != nil {
		t.Errorf("host %+v, owners %v", h, owners)
	}
	if h.CPUUtilization == nil {
		t.Error("second sample has no CPU utilisation")
	}
}
