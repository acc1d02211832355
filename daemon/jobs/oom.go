package jobs

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/plugins"
)

// An out-of-memory kill. A worker the kernel's out-of-memory killer ended
// exits by SIGKILL, like one killed by hand; the kernel log says which it
// was ("Killed process <pid> (<comm>)", for a cgroup's limit or the
// machine's). For the ranks of an attempt on this node that died by
// SIGKILL, the runner looks for their pids in the log since the attempt
// began, and names the kill (restartpolicy.go). Reading the log needs root
// (CAP_SYSLOG); without it no kill is named.

// kmsgPath is the kernel log, one record per read.
const kmsgPath = "/dev/kmsg"

// oomRanks lists the ranks of res, run on this node, that died by SIGKILL
// and that the kernel log says the out-of-memory killer killed since the
// attempt started at since.
func oomRanks(res plugins.Result, since time.Time) []int {
	pids := map[int]int{}
	for _, r := range res.Ranks {
		if r.Signal == "SIGKILL" && !r.Stopped && r.PID > 0 {
			pids[r.PID] = r.Rank
		}
	}
	if len(pids) == 0 {
		return nil
	}
	var out []int
	for pid := range oomKills(readKmsg(), sinceBoot(since)) {
		if rank, ok := pids[pid]; ok {
			out = append(out, rank)
		}
	}
	return out
}

// sinceBoot is when t was, in the kernel log's clock (µs since boot), less
// a second for the clocks' drift.
func sinceBoot(t time.Time) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return (ts.Nano()-time.Since(t).Nanoseconds())/1000 - 1e6
}

// readKmsg reads the records of the kernel log there are now (nil when it
// cannot be read). Raw system calls: os.File would wait on the poller for
// the next record when there is none.
func readKmsg() []string {
	fd, err := unix.Open(kmsgPath, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var out []string
	buf := make([]byte, 8192)
	for len(out) < 1<<16 {
		n, err := unix.Read(fd, buf)
		switch {
		case errors.Is(err, unix.EPIPE), errors.Is(err, unix.EINTR): // records overwritten meanwhile: read on
			continue
		case err != nil || n <= 0: // EAGAIN: no more
			return out
		}
		out = append(out, string(buf[:n]))
	}
	return out
}

// oomKills are the pids the out-of-memory killer killed in the kernel log
// records recs ("pri,seq,µs,flags;message"), at or after µs since boot.
// Pure: a table test holds it.
func oomKills(recs []string, since int64) map[int]bool {
	out := map[int]bool{}
	for _, rec := range recs {
		head, msg, ok := strings.Cut(rec, ";")
		if !ok {
			continue
		}
		f := strings.Split(head, ",")
		if len(f) < 3 {
			continue
		}
		if us, err := strconv.ParseInt(f[2], 10, 64); err != nil || us < since {
			continue
		}
		_, rest, ok := strings.Cut(msg, "Killed process ")
		if !ok || !strings.Contains(strings.ToLower(msg), "out of memory") {
			continue
		}
		num, _, _ := strings.Cut(rest, " ")
		if pid, err := strconv.Atoi(num); err == nil {
			out[pid] = true
		}
	}
	return out
}
