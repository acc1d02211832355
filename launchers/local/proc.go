package local

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// procStat is the part of /proc/<pid>/stat the launcher and the reaper use.
type procStat struct {
	pid   int
	state byte // R, S, D, Z, ...
	ppid  int
	pgrp  int
}

// readProcStat parses /proc/<pid>/stat. The command name (field 2) may hold
// spaces and parentheses, so fields are counted after its last ')'.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state), f[n-3] is field n
	if len(f) < 3 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	st := procStat{pid: pid, state: f[0][0]}
	if st.ppid, err = strconv.Atoi(string(f[1])); err != nil {
		return procStat{}, fmt.Errorf("parse ppid in /proc/%d/stat: %w", pid, err)
	}
	if st.pgrp, err = strconv.Atoi(string(f[2])); err != nil {
		return procStat{}, fmt.Errorf("parse pgrp in /proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// scanProcs calls fn for every process in /proc whose stat can be read;
// processes that vanish during the scan are skipped.
func scanProcs(fn func(procStat)) error {
	d, err := os.Open("/proc")
	if err != nil {
		return fmt.Errorf("scan /proc: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("scan /proc: %w", err)
	}
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if st, err := readProcStat(pid); err == nil {
			fn(st)
		}
	}
	return nil
}

// groupMembers lists the processes of process group pgid.
func groupMembers(pgid int) ([]procStat, error) {
	var out []procStat
	err := scanProcs(func(st procStat) {
		if st.pgrp == pgid {
			out = append(out, st)
		}
	})
	return out, err
}
