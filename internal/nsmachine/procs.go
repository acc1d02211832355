package nsmachine

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/internal/procstat"
)

// Proc is a process seen in /proc.
type Proc struct {
	PID   int
	PPID  int
	Comm  string
	State string   // the state letter of /proc/PID/stat (Z: a zombie)
	Env   []string // KEY=VALUE
}

// Getenv returns the value of key in p's environment.
func (p Proc) Getenv(key string) string {
	for _, kv := range p.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// String is "PID(comm,state)".
func (p Proc) String() string { return fmt.Sprintf("%d(%s,%s)", p.PID, p.Comm, p.State) }

// NetNSInode is the inode of the network namespace named name (/run/netns/name).
func NetNSInode(name string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/run/netns/"+name, &st); err != nil {
		return 0, fmt.Errorf("stat namespace %s: %w", name, err)
	}
	return st.Ino, nil
}

// ProcsInNet lists the processes whose network namespace has inode ino.
func ProcsInNet(ino uint64) []Proc {
	want := "net:[" + strconv.FormatUint(ino, 10) + "]"
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []Proc
	for _, d := range dirs {
		if l, err := os.Readlink(d + "/ns/net"); err != nil || l != want {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		p, ok := readProc(pid)
		if !ok {
			continue
		}
		if env, err := os.ReadFile(d + "/environ"); err == nil {
			for kv := range strings.SplitSeq(string(env), "\x00") {
				if kv != "" {
					p.Env = append(p.Env, kv)
				}
			}
		}
		out = append(out, p)
	}
	return out
}

// readProc reads pid's stat line.
func readProc(pid int) (Proc, bool) {
	st, err := procstat.Read(pid)
	if err != nil {
		return Proc{}, false
	}
	return Proc{PID: pid, PPID: st.PPID, Comm: st.Name, State: string(st.State)}, true
}

// ProcState reads the state letter and the parent of pid; ok is false when
// it is gone.
func ProcState(pid int) (state string, ppid int, ok bool) {
	p, ok := readProc(pid)
	return p.State, p.PPID, ok
}

// startTime is pid's start time in clock ticks since boot (field 22 of its
// stat line), which tells a reused PID apart; 0 when it is gone.
func startTime(pid int) uint64 {
	st, _ := procstat.Read(pid)
	return st.Start
}

// reap reaps pid when it is a zombie child of this process; it reports
// whether pid is gone for good (reaped, vanished, or a zombie of another
// parent, which is that parent's to reap).
func reap(pid int) bool {
	state, ppid, ok := ProcState(pid)
	switch {
	case !ok:
		return true
	case state != "Z":
		return false
	case ppid != os.Getpid():
		return true
	}
	var ws unix.WaitStatus
	got, _ := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	return got == pid
}

// Settle waits up to d for every process in the network namespace ino but
// keep to be gone, and returns those left. A process that exits leaves the
// namespace at once (a zombie has none), so the processes seen are followed
// by PID: one that is a zombie child of this process is reaped here; a
// zombie of another parent is that parent's to reap.
func Settle(ino uint64, keep int, d time.Duration) []Proc {
	deadline := time.Now().Add(d)
	seen := map[int]Proc{}
	for {
		for _, p := range ProcsInNet(ino) {
			if p.PID != keep {
				seen[p.PID] = p
			}
		}
		var left []Proc
		for pid, p := range seen {
			if reap(pid) {
				delete(seen, pid)
				continue
			}
			p.State, p.PPID, _ = ProcState(pid)
			left = append(left, p)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SettleGone waits up to d for the processes ps to be gone (reaping those
// that are zombie children of this process) and returns those left.
func SettleGone(ps []Proc, d time.Duration) []Proc {
	deadline := time.Now().Add(d)
	for {
		var left []Proc
		for _, p := range ps {
			if !reap(p.PID) {
				left = append(left, p)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}
