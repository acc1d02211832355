// Package procstat reads a process's /proc/PID/stat line (proc(5)): its
// state, parent, process group, start time, CPU times and resident set, in
// one read.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// UserHZ is the unit of the times in a stat line (USER_HZ, 100 on every
// Linux architecture).
const UserHZ = 100

// pageSize is the unit of the resident set in a stat line.
var pageSize = uint64(os.Getpagesize())

// Stat is what a stat line says of a process.
type Stat struct {
	PID, PPID, PGRP int
	// State is its state letter: R, S, D, Z, T, ...
	State byte
	// Name is its command name (at most 15 bytes, as the kernel keeps it).
	Name string
	// Start is when it started, in clock ticks after boot: with its PID,
	// it tells a process from a later one given the same PID.
	Start uint64
	// CPUSeconds is its user and system time; RSSBytes its resident set.
	CPUSeconds float64
	RSSBytes   uint64
}

// Read reads /proc/<pid>/stat.
func Read(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return Parse(pid, b)
}

// Parse parses the stat line of pid. The command name (field 2) may hold
// spaces and parentheses, so the fields are counted after its last ')'.
func Parse(pid int, b []byte) (Stat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(b[end+1:]) // f[0] is field 3 (state): field n is f[n-3]
	if len(f) < 22 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var v [25]uint64
	for _, n := range []int{4, 5, 14, 15, 22, 24} {
		x, err := strconv.ParseUint(string(f[n-3]), 10, 64)
		if err != nil {
			return Stat{}, fmt.Errorf("parse field %d of /proc/%d/stat: %w", n, pid, err)
		}
		v[n] = x
	}
	return Stat{
		PID: pid, PPID: int(v[4]), PGRP: int(v[5]), State: f[0][0], Name: string(b[open+1 : end]),
		Start: v[22], CPUSeconds: float64(v[14]+v[15]) / UserHZ, RSSBytes: v[24] * pageSize,
	}, nil
}

// Each calls fn with the stat of every process in /proc; a process that
// ends meanwhile is left out.
func Each(fn func(Stat)) error {
	d, err := os.Open("/proc")
	if err != nil {
		return fmt.Errorf("list processes: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list processes: %w", err)
	}
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if st, err := Read(pid); err == nil {
			fn(st)
		}
	}
	return nil
}
