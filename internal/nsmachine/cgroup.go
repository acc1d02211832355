package nsmachine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupRoot is where the cgroup-v1 hierarchies are mounted (a variable
// for the tests).
var cgroupRoot = "/sys/fs/cgroup"

// controllers are the cgroup-v1 controllers an isolated machine is put in:
// cpu for its quota, memory for its limit, cpuacct for the CPU time it
// used, freezer to stop everything in it at once.
var controllers = []string{"cpu", "memory", "cpuacct", "freezer"}

// cfsPeriod is the CFS period the quota is set against, in µs.
const cfsPeriod = 100000

// cgroupDir is the directory of cgroup rel in controller c.
func cgroupDir(c, rel string) string { return filepath.Join(cgroupRoot, c, rel) }

// makeCgroups creates cgroup rel in every controller with the limits.
func makeCgroups(rel string, cpus float64, mem int64) error {
	if rel == "" || strings.Contains(rel, "..") {
		return fmt.Errorf("cgroup %q: want a relative path", rel)
	}
	for _, c := range controllers {
		if err := os.MkdirAll(cgroupDir(c, rel), 0o755); err != nil {
			return fmt.Errorf("create cgroup %s:%s: %w", c, rel, err)
		}
	}
	if cpus > 0 {
		if err := writeFile(cgroupDir("cpu", rel), "cpu.cfs_period_us", strconv.Itoa(cfsPeriod)); err != nil {
			return err
		}
		quota := max(int(cpus*cfsPeriod), 1000)
		if err := writeFile(cgroupDir("cpu", rel), "cpu.cfs_quota_us", strconv.Itoa(quota)); err != nil {
			return err
		}
	}
	if mem > 0 {
		if err := writeFile(cgroupDir("memory", rel), "memory.limit_in_bytes", strconv.FormatInt(mem, 10)); err != nil {
			return err
		}
	}
	return nil
}

// joinCgroups moves pid into cgroup rel of every controller.
func joinCgroups(rel string, pid int) error {
	for _, c := range controllers {
		if err := writeFile(cgroupDir(c, rel), "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(dir, name, value string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %s to %s/%s: %w", value, dir, name, err)
	}
	return nil
}

// cgroupPIDs lists the processes in cgroup rel of controller c.
func cgroupPIDs(c, rel string) []int {
	b, err := os.ReadFile(filepath.Join(cgroupDir(c, rel), "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// killCgroup freezes cgroup rel, SIGKILLs every process in it and thaws
// it, so that nothing in it can fork away meanwhile.
func killCgroup(rel string) {
	dir := cgroupDir("freezer", rel)
	_ = writeFile(dir, "freezer.state", "FROZEN")
	for range 50 { // FREEZING until every task is frozen
		b, _ := os.ReadFile(filepath.Join(dir, "freezer.state"))
		if strings.TrimSpace(string(b)) != "FREEZING" {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	for _, pid := range cgroupPIDs("freezer", rel) {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	_ = writeFile(dir, "freezer.state", "THAWED")
}

// removeCgroups removes cgroup rel from every controller, waiting up to d
// for the processes in it to be gone; a cgroup already gone is no error.
func removeCgroups(rel string, d time.Duration) error {
	deadline := time.Now().Add(d)
	var errs []error
	for _, c := range controllers {
		dir := cgroupDir(c, rel)
		for {
			err := unix.Rmdir(dir)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove cgroup %s:%s (processes %v): %w", c, rel, cgroupPIDs(c, rel), err))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// CgroupExists reports whether cgroup rel exists in any controller.
func CgroupExists(rel string) bool {
	for _, c := range controllers {
		if _, err := os.Stat(cgroupDir(c, rel)); err == nil {
			return true
		}
	}
	return false
}

// RemoveCgroupTree kills every process in cgroup rel and the cgroups
// under it, in every controller, and removes them all: what is left of
// machines whose records are lost.
func RemoveCgroupTree(rel string) error {
	if rel == "" || strings.Contains(rel, "..") {
		return fmt.Errorf("cgroup %q: want a relative path", rel)
	}
	var subs []string
	_ = filepath.WalkDir(cgroupDir("freezer", rel), func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			sub, _ := filepath.Rel(cgroupDir("freezer", ""), path)
			subs = append(subs, sub)
		}
		return nil
	})
	for _, c := range controllers { // the other controllers may hold cgroups the freezer lost
		_ = filepath.WalkDir(cgroupDir(c, rel), func(path string, d os.DirEntry, err error) error {
			if sub, _ := filepath.Rel(cgroupDir(c, ""), path); err == nil && d.IsDir() && !slices.Contains(subs, sub) {
				subs = append(subs, sub)
			}
			return nil
		})
	}
	slices.SortStableFunc(subs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") }) // the deepest first
	var errs []error
	for _, sub := range subs {
		killCgroup(sub)
		errs = append(errs, removeCgroups(sub, 2*time.Second))
	}
	return errors.Join(errs...)
}
