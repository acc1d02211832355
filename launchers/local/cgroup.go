package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// An attempt's cgroup. A process group does not hold a job's processes: a
// worker's child that calls setsid (a daemonised data loader, a shell's
// `setsid cmd &`) leaves it, outlives the attempt, and dies unreaped. So
// each attempt also gets a cgroup of its own in the cgroup-v2 hierarchy
// (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a v1 hybrid), below the
// daemon's own cgroup, and its ranks are started inside it (clone3's
// CLONE_INTO_CGROUP: there is no moment when a rank runs outside it). No
// controller is enabled in it: it only holds the processes, which no
// setsid or setpgid takes out. When the attempt ends, cgroup.kill ends
// every process in it; the reaper reaps the orphans among them (a zombie's
// /proc/<pid>/cgroup still names the cgroup); then the cgroup is removed.
// Without a writable cgroup-v2 hierarchy (an unprivileged daemon) an
// attempt has none, and its process group is all the launcher holds.

// cgroupV2Roots are where a cgroup-v2 hierarchy is mounted: the unified
// mount of a hybrid system, or the only one.
var cgroupV2Roots = []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}

// cgroupBase is the directory attempts' cgroups are made in and its path
// as /proc/<pid>/cgroup shows it ("" when there is none).
var cgroupBase = sync.OnceValues(func() (dir, rel string) {
	self := ownCgroup()
	for _, root := range cgroupV2Roots {
		var st unix.Statfs_t
		if err := unix.Statfs(root, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
			continue
		}
		rel = filepath.Join(self, "scavenger")
		dir = filepath.Join(root, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", ""
		}
		_ = unix.Rmdir(dir) // made for each attempt, removed with the last (remove)
		return dir, rel
	}
	return "", ""
})

// ownCgroup is this process's cgroup-v2 path ("0::" in /proc/self/cgroup).
func ownCgroup() string {
	p, _ := cgroupOf(os.Getpid())
	if p == "" {
		return "/"
	}
	return p
}

// cgroupOf is pid's cgroup-v2 path; a zombie's still names the cgroup it
// died in.
func cgroupOf(pid int) (string, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return p, nil
		}
	}
	return "", sc.Err()
}

// attemptCgroup is the cgroup of one attempt.
type attemptCgroup struct {
	dir, rel string
	fd       int // open on dir, for clone3
}

// cgroupSeq numbers this process's attempt cgroups.
var cgroupSeq atomic.Int64

// cgroupPrefix begins the names of the cgroups of job's attempt (below
// cgroupBase); each ends with this process's pid and a number of its own.
func cgroupPrefix(job string, attempt int) string { return fmt.Sprintf("%s.a%d.", job, attempt) }

// newAttemptCgroup makes the cgroup of job's attempt; nil (and no error)
// when there is no cgroup-v2 hierarchy to make it in.
func newAttemptCgroup(job string, attempt int) (*attemptCgroup, error) {
	base, baseRel := cgroupBase()
	if base == "" {
		return nil, nil
	}
	sweepCgroups(base)
	name := fmt.Sprintf("%s%d.%d", cgroupPrefix(job, attempt), os.Getpid(), cgroupSeq.Add(1))
	c := &attemptCgroup{dir: filepath.Join(base, name), rel: filepath.Join(baseRel, name), fd: -1}
	err := os.MkdirAll(c.dir, 0o755) // a last attempt's remove may take base away meanwhile: once more
	if errors.Is(err, os.ErrNotExist) {
		err = os.MkdirAll(c.dir, 0o755)
	}
	if err != nil {
		return nil, fmt.Errorf("make cgroup %s: %w", c.dir, err)
	}
	fd, err := unix.Open(c.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Rmdir(c.dir)
		return nil, fmt.Errorf("open cgroup %s: %w", c.dir, err)
	}
	c.fd = fd
	return c, nil
}

// sweepCgroups removes the empty cgroups in base that a process now gone
// made (one killed before it could remove them). Those that still hold
// processes are a lost attempt's: StopOrphaned ends them.
func sweepCgroups(base string) {
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		f := strings.Split(e.Name(), ".")
		if !e.IsDir() || len(f) < 3 {
			continue
		}
		pid, err := strconv.Atoi(f[len(f)-2])
		if err != nil || pid == os.Getpid() || unix.Kill(pid, 0) == nil {
			continue
		}
		c := &attemptCgroup{dir: filepath.Join(base, e.Name()), fd: -1}
		if !c.populated() {
			_ = unix.Rmdir(c.dir)
		}
	}
}

// existingCgroups are the cgroups of job's attempt that exist (an attempt
// a previous daemon started).
func existingCgroups(job string, attempt int) []*attemptCgroup {
	base, baseRel := cgroupBase()
	if base == "" {
		return nil
	}
	dirs, _ := filepath.Glob(filepath.Join(base, cgroupPrefix(job, attempt)+"*"))
	var out []*attemptCgroup
	for _, d := range dirs {
		out = append(out, &attemptCgroup{dir: d, rel: filepath.Join(baseRel, filepath.Base(d)), fd: -1})
	}
	return out
}

// pids lists the live processes in the cgroup.
func (c *attemptCgroup) pids() []int {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// signal sends sig to every process in the cgroup but those of process
// group except (0: none), which the caller signalled already: a second copy
// of a stop's SIGTERM would run a worker's handler twice (a trainer that
// checkpoints on the first may abort on the second).
func (c *attemptCgroup) signal(sig unix.Signal, except int) {
	for _, pid := range c.pids() {
		if except != 0 {
			if g, err := unix.Getpgid(pid); err == nil && g == except {
				continue
			}
		}
		_ = unix.Kill(pid, sig)
	}
}

// kill SIGKILLs every process in the cgroup, and those forked meanwhile
// (cgroup.kill; without it, each process found).
func (c *attemptCgroup) kill() {
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		c.signal(unix.SIGKILL, 0)
	}
}

// populated reports whether a live process is left in the cgroup.
func (c *attemptCgroup) populated() bool {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.events"))
	if err != nil {
		return len(c.pids()) > 0
	}
	return bytes.Contains(b, []byte("populated 1"))
}

// holds reports whether pid is (or died) in the cgroup.
func (c *attemptCgroup) holds(pid int) bool {
	p, err := cgroupOf(pid)
	return err == nil && p == c.rel
}

// remove closes the cgroup's descriptor and removes it (it must be empty).
func (c *attemptCgroup) remove() error {
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
	}
	if err := unix.Rmdir(c.dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove cgroup %s (processes %v): %w", c.dir, c.pids(), err)
	}
	_ = unix.Rmdir(filepath.Dir(c.dir)) // the base, unless another attempt's cgroup is in it
	return nil
}
