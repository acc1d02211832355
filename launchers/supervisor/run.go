package supervisor

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
)

// Tally is Run's record of the ranks' ends, handed to the launcher's event
// handler. It belongs to Run's goroutine: use it only inside the handler.
type Tally struct {
	s       *Supervisor
	esc     escalation
	results []plugins.RankResult
	ended   []bool
	running int
	failed  int  // the first rank that failed on its own, or -1
	byCall  bool // Stop was called
}

func newTally(s *Supervisor) *Tally {
	t := &Tally{s: s, results: make([]plugins.RankResult, s.cfg.N), ended: make([]bool, s.cfg.N)}
	t.Restart()
	return t
}

// Exit records how a rank ended; the end of a rank out of range, or of one
// that already ended in this run, is ignored. The first rank that fails on
// its own (exit code not 0, or its host lost) becomes the attempt's
// failure and, unless Config.LeavePeers, stops the others with Config.Grace.
func (t *Tally) Exit(e Exit) {
	r := e.Rank
	if r < 0 || r >= len(t.results) || t.ended[r] {
		return
	}
	t.ended[r] = true
	t.running--
	t.results[r] = e.Result
	t.results[r].Rank, t.results[r].Stopped = r, false
	t.s.logger.Debug("rank exited", zap.Int("rank", r), zap.Int("exit_code", e.Result.ExitCode),
		zap.String("signal", e.Result.Signal), zap.NamedError("host_lost", e.Lost))
	switch {
	case (t.esc.stopping() || t.failed >= 0) && e.Lost == nil:
		t.results[r].Stopped = true
	case e.failed() && t.failed < 0:
		t.failed = r
		if t.running > 0 && !t.s.cfg.LeavePeers {
			t.s.logger.Warn("rank failed; stopping the others", zap.Int("rank", r), zap.Int("exit_code", e.Result.ExitCode),
				zap.String("signal", e.Result.Signal), zap.NamedError("host_lost", e.Lost), zap.Duration("grace", t.s.cfg.Grace))
			t.beginStop(time.Now().Add(t.s.cfg.Grace))
		}
	}
}

// Ended reports whether rank's end has been recorded in this run.
func (t *Tally) Ended(rank int) bool { return rank >= 0 && rank < len(t.ended) && t.ended[rank] }

// Restart begins a new run of every rank (a requeued batch job): the ends
// recorded so far and the failure are forgotten. A stop under way goes on.
func (t *Tally) Restart() {
	for i := range t.results {
		t.results[i] = plugins.RankResult{Rank: i}
		t.ended[i] = false
	}
	t.running, t.failed = len(t.results), -1
}

// beginStop starts stopping (Escalate(SIGTERM), and Signal is refused from
// now on) or moves the SIGKILL deadline earlier.
func (t *Tally) beginStop(deadline time.Time) {
	if t.esc.begin(deadline) {
		t.s.mu.Lock()
		t.s.stopping = true
		t.s.mu.Unlock()
		t.s.ranks.Escalate(context.Background(), syscall.SIGTERM)
	}
}

// stopRequested handles a poke of the Stop calls.
func (t *Tally) stopRequested() {
	deadline := t.s.stops.deadline()
	if !t.byCall {
		t.byCall = true
		t.s.logger.Info("stopping attempt", zap.Duration("grace", time.Until(deadline).Round(time.Millisecond)))
	}
	t.beginStop(deadline)
}

// Run supervises the attempt until events is closed, handing each event to
// handle on this goroutine (handle reports ends with the Tally's methods),
// then finishes it: Signal is refused from then on, the Signal calls in
// flight are joined, the launcher's Finish runs and the Result is
// published. It returns once Wait can return; call it once.
func Run[E any](s *Supervisor, events <-chan E, handle func(*Tally, E)) {
	defer close(s.done)
	t := supervise(s, events, handle)
	s.publish(t)
}

// RunRanks is Run for a launcher that can wait for each rank by itself
// (a process, an SSH session): it calls wait for every rank on a goroutine
// of its own, records each Exit, and finishes the attempt once all have
// returned and been joined.
func RunRanks(s *Supervisor, wait func(rank int) Exit) {
	defer close(s.done)
	exits := make(chan Exit, s.cfg.N)
	left := atomic.Int64{}
	left.Store(int64(s.cfg.N))
	var waiters sync.WaitGroup
	for r := range s.cfg.N {
		waiters.Go(func() {
			exits <- wait(r)
			if left.Add(-1) == 0 {
				close(exits)
			}
		})
	}
	if s.cfg.N <= 0 {
		close(exits)
	}
	t := supervise(s, exits, (*Tally).Exit)
	waiters.Wait()
	s.publish(t)
}

// supervise is the loop: events, Stop calls and the SIGKILL deadline,
// until events is closed.
func supervise[E any](s *Supervisor, events <-chan E, handle func(*Tally, E)) *Tally {
	t := newTally(s)
	defer t.esc.close()
	for events != nil {
		select {
		case e, ok := <-events:
			if !ok {
				events = nil
				break
			}
			handle(t, e)
		case <-s.stops.c:
			t.stopRequested()
		case <-t.esc.due():
			t.esc.fired()
			s.logger.Warn("grace over; killing the ranks")
			s.ranks.Escalate(context.Background(), syscall.SIGKILL)
		}
	}
	return t
}

// publish finishes the attempt and publishes its Result (Done is closed by
// the caller).
func (s *Supervisor) publish(t *Tally) {
	s.mu.Lock()
	s.finished = true // no Signal starts from now on
	s.mu.Unlock()
	s.signals.Wait()
	end := s.ranks.Finish(context.Background(), t.results)

	stopping := t.esc.stopping() || t.failed >= 0
	for r := range t.results {
		if t.ended[r] {
			continue
		}
		rr := &t.results[r]
		if stopping {
			k := Signaled(syscall.SIGKILL)
			rr.ExitCode, rr.Signal, rr.Stopped = k.ExitCode, k.Signal, true
		} else {
			rr.ExitCode, rr.Signal = end.Unreported.ExitCode, end.Unreported.Signal
		}
		if !rr.Stopped && rr.ExitCode != 0 && t.failed < 0 {
			t.failed = r
		}
	}
	res := plugins.Result{FailedRank: t.failed, Stopped: t.byCall, Ranks: t.results, LostHosts: end.LostHosts}
	if t.failed >= 0 {
		res.ExitCode = t.results[t.failed].ExitCode
	}
	var err error
	if end.Err != nil {
		err = fmt.Errorf("%s: %w", s.ranks, end.Err)
	}
	s.mu.Lock()
	s.result, s.err = res, err
	s.mu.Unlock()
	s.logger.Info("attempt finished", zap.Int("exit_code", res.ExitCode), zap.Int("failed_rank", res.FailedRank),
		zap.Bool("stopped", res.Stopped), zap.Strings("lost_hosts", res.LostHosts), zap.Bool("lost", err != nil))
}
