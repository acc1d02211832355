package host

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// userHZ is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// every Linux architecture).
const userHZ = 100

// pageSize is the unit of the resident set in /proc/PID/stat.
var pageSize = uint64(os.Getpagesize())

// procStat is what one read of /proc/PID/stat gives of a process: all a
// sample needs of it, where reading it field by field (gopsutil's Ppid,
// CreateTime, Times, Name, MemoryInfo) opened five files and the boot time
// for every process, every sample.
type procStat struct {
	pid, ppid int32
	name      string
	start     uint64  // clock ticks after boot: with pid, names the process
	cpu       float64 // user and system seconds
	rss       uint64  // bytes
}

// readProcStat reads /proc/<pid>/stat. The command name (field 2) may hold
// spaces and parentheses, so the fields are counted after its last ')'.
func readProcStat(pid int32) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(pid, b)
}

// parseProcStat parses the text of /proc/<pid>/stat (proc(5)).
func parseProcStat(pid int32, b []byte) (procStat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(b[end+1:]) // f[0] is field 3 (state): field n is f[n-3]
	if len(f) < 22 {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	num := func(n int) (uint64, error) {
		v, err := strconv.ParseUint(string(f[n-3]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse field %d of /proc/%d/stat: %w", n, pid, err)
		}
		return v, nil
	}
	st := procStat{pid: pid, name: string(b[open+1 : end])}
	var ppid, utime, stime, rss uint64
	var err error
	for _, x := range []struct {
		n int
		v *uint64
	}{{4, &ppid}, {14, &utime}, {15, &stime}, {22, &st.start}, {24, &rss}} {
		if *x.v, err = num(x.n); err != nil {
			return procStat{}, err
		}
	}
	st.ppid = int32(ppid)
	st.cpu = float64(utime+stime) / userHZ
	st.rss = rss * pageSize
	return st, nil
}

// listProcs reads the stat of every process in /proc; a process that ends
// meanwhile is left out.
func listProcs() ([]procStat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	out := make([]procStat, 0, len(names))
	for _, n := range names {
		pid, err := strconv.ParseInt(n, 10, 32)
		if err != nil {
			continue
		}
		if st, err := readProcStat(int32(pid)); err == nil {
			out = append(out, st)
		}
	}
	return out, nil
}
