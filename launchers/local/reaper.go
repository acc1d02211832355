package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/internal/procstat"
)

// reapInterval is how often the reaper scans when no SIGCHLD arrives. The
// kernel sends a subreaper SIGCHLD for every child that dies, an orphan
// re-parented to it included (one that was a zombie already too), and a
// signal that arrives during a scan is kept for one more: the scan on a
// timer is a safety net. Each scan reads every process's stat, which on a
// node with hundreds of processes costs milliseconds.
const reapInterval = 10 * time.Second

// Reaper collects the orphaned descendants of the launcher's attempts.
//
// A worker that dies leaves its own children (data loaders, shells' background
// jobs) orphaned. They are re-parented to the nearest child subreaper, or to
// PID 1 — which, in containers without an init, never reaps them, so they stay
// as zombies forever. StartReaper makes this process a child subreaper, so
// those orphans become its children, and reaps them.
//
// It reaps only zombies whose parent is this process, whose process group is
// that of an attempt started by a Launcher given this Reaper, and which are
// not one of that attempt's rank processes (those belong to os/exec's
// Cmd.Wait); a descendant that left the group (setsid, setpgid) is known
// by the attempt's cgroup (cgroup.go). It never calls wait4(-1), which would
// steal the exit of any exec.Cmd in the process.
//
// Subreaping is a property of the whole process: start at most one Reaper per
// process.
type Reaper struct {
	logger *zap.Logger
	self   int

	// mu guards groups and serialises scans with (un)registration, so an
	// attempt's group is never scanned before its rank pids are known.
	mu     sync.Mutex
	groups map[int]reaped // by pgid

	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

// StartReaper makes this process a child subreaper (prctl
// PR_SET_CHILD_SUBREAPER) and starts a goroutine that reaps orphaned zombies
// of registered attempts on every SIGCHLD and every reapInterval. The goroutine
// ends when ctx is done or Stop is called; Stop must be called in any case to
// join it and to clear the subreaper flag.
func StartReaper(ctx context.Context, logger *zap.Logger) (*Reaper, error) {
	if logger == nil {
		return nil, errors.New("start reaper: nil logger")
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("start reaper: set child subreaper: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &Reaper{
		logger: logger.Named("reaper"),
		self:   os.Getpid(),
		groups: map[int]reaped{},
		cancel: cancel,
		done:   make(chan struct{}),
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGCHLD)
	go r.run(ctx, sigs)
	return r, nil
}

// Stop ends the reaper's goroutine, waits for it and clears the subreaper
// flag. It is safe to call more than once. Attempts still registered are
// drained by their own Wait (see Launcher) as long as the flag was set when
// their orphans appeared.
func (r *Reaper) Stop() {
	r.stopOnce.Do(func() {
		r.cancel()
		<-r.done
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0); err != nil {
			r.logger.Warn("clear child subreaper", zap.Error(err))
		}
	})
}

func (r *Reaper) run(ctx context.Context, sigs chan os.Signal) {
	defer close(r.done)
	defer signal.Stop(sigs)
	t := time.NewTicker(reapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sigs:
		case <-t.C:
		}
		r.reap(func(int) bool { return true })
	}
}

// reaped is an attempt whose orphans the reaper reaps: its ranks' pids
// (os/exec reaps those) and its cgroup (nil: none).
type reaped struct {
	ranks map[int]bool
	cg    *attemptCgroup
}

// register starts reaping the orphans of process group pgid and of cgroup
// cg (nil: none), whose rank processes ranks are reaped by os/exec and must
// never be touched here.
func (r *Reaper) register(pgid int, ranks []int, cg *attemptCgroup) {
	set := make(map[int]bool, len(ranks))
	for _, p := range ranks {
		set[p] = true
	}
	r.mu.Lock()
	r.groups[pgid] = reaped{ranks: set, cg: cg}
	r.mu.Unlock()
}

// unregister stops reaping process group pgid.
func (r *Reaper) unregister(pgid int) {
	r.mu.Lock()
	delete(r.groups, pgid)
	r.mu.Unlock()
}

// reapGroup reaps the orphaned zombies of one registered group now.
func (r *Reaper) reapGroup(pgid int) int {
	return r.reap(func(g int) bool { return g == pgid })
}

// reap reaps every zombie child of this process that belongs to a registered
// attempt accepted by want (its process group, or its cgroup: a process
// that left the group) and is not a rank of it; it returns how many.
func (r *Reaper) reap(want func(pgid int) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.groups) == 0 {
		return 0
	}
	var zombies []int
	err := procstat.Each(func(st procstat.Stat) {
		if st.State != 'Z' || st.PPID != r.self {
			return
		}
		if pgid, ok := r.attemptOf(st); ok && want(pgid) && !r.groups[pgid].ranks[st.PID] {
			zombies = append(zombies, st.PID)
		}
	})
	if err != nil {
		r.logger.Warn("scan for orphans", zap.Error(err))
		return 0
	}
	n := 0
	for _, pid := range zombies {
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if err != nil || got != pid {
			r.logger.Debug("reap orphan", zap.Int("pid", pid), zap.Error(err))
			continue
		}
		n++
		r.logger.Debug("reaped orphan", zap.Int("pid", pid))
	}
	return n
}

// attemptOf is the registered attempt (by its pgid) a process belongs to:
// by its process group, else by its cgroup.
func (r *Reaper) attemptOf(st procstat.Stat) (int, bool) {
	if _, ok := r.groups[st.PGRP]; ok {
		return st.PGRP, true
	}
	for pgid, g := range r.groups {
		if g.cg != nil && g.cg.holds(st.PID) {
			return pgid, true
		}
	}
	return 0, false
}

// zombiesIn lists this process's zombie children that died in cg (nil
// without a reaper: nothing here reaps them).
func (r *Reaper) zombiesIn(cg *attemptCgroup) []int {
	if r == nil {
		return nil
	}
	var out []int
	_ = procstat.Each(func(st procstat.Stat) {
		if st.State == 'Z' && st.PPID == r.self && cg.holds(st.PID) {
			out = append(out, st.PID)
		}
	})
	return out
}
