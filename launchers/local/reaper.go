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
)

// reapInterval is how often the reaper scans when no SIGCHLD arrives.
const reapInterval = time.Second

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
// Cmd.Wait). It never calls wait4(-1), which would steal the exit of any
// exec.Cmd in the process. A descendant that leaves its attempt's process
// group (setsid, setpgid) is out of reach, of the reaper and of the group's
// signals alike.
//
// Subreaping is a property of the whole process: start at most one Reaper per
// process.
type Reaper struct {
	logger *zap.Logger
	self   int

	// mu guards groups and serialises scans with (un)registration, so an
	// attempt's group is never scanned before its rank pids are known.
	mu     sync.Mutex
	groups map[int]map[int]bool // pgid -> pids of the attempt's ranks

	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

// StartReaper makes this process a child subreaper (prctl
// PR_SET_CHILD_SUBREAPER) and starts a goroutine that reaps orphaned zombies
// of registered attempts on every SIGCHLD and every second. The goroutine
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
		groups: map[int]map[int]bool{},
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

// register starts reaping the orphans of process group pgid, whose rank
// processes ranks are reaped by os/exec and must never be touched here.
func (r *Reaper) register(pgid int, ranks []int) {
	set := make(map[int]bool, len(ranks))
	for _, p := range ranks {
		set[p] = true
	}
	r.mu.Lock()
	r.groups[pgid] = set
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
// group accepted by want and is not a rank of it; it returns how many.
func (r *Reaper) reap(want func(pgid int) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.groups) == 0 {
		return 0
	}
	var zombies []int
	err := scanProcs(func(st procStat) {
		ranks, ok := r.groups[st.pgrp]
		if ok && st.state == 'Z' && st.ppid == r.self && want(st.pgrp) && !ranks[st.pid] {
			zombies = append(zombies, st.pid)
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
