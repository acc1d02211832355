package jobs

import (
	"errors"
	"fmt"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/control"
	"github.com/scavenger-ml/scavenger/internal/words"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
	"go.uber.org/zap"
)

// move begins a move: the workers checkpoint and exit, and the runner
// relaunches them at m.cfg. A move that cannot begin is an error, and m is
// not answered.
func (w *watch) move(m moveReq) error {
	if w.out.moved != nil || w.out.stopped {
		return fmt.Errorf("the job is already moving or stopping")
	}
	viaSignal, err := w.checkpoint()
	if err != nil {
		return err
	}
	w.out.moved, w.out.movedAt, w.out.viaSignal = &m, time.Now(), viaSignal
	w.deadline = time.After(w.grace)
	return nil
}

// moveOrPin pins or releases the job when m says so, and moves it when m
// names another configuration than its own (a pin where it runs is no
// move: m is answered at once).
func (w *watch) moveOrPin(m moveReq) error {
	j := &w.r.rec.job
	if m.pin != nil {
		j.Pinned = *m.pin
		if w.r.ctl != nil {
			w.r.ctl.Pin(*m.pin)
		}
		w.r.save(w.kill)
		w.r.event(telemetry.EventMoved, w.n, pinNote(*j, m.reason))
	}
	if m.pin != nil && sameConfig(m.cfg, j.Config) {
		m.fail(nil)
		return nil
	}
	return w.move(m)
}

// pinNote says what pinning or releasing j means.
func pinNote(j api.Job, reason string) string {
	if j.Pinned {
		return fmt.Sprintf("pinned at %s (%s): the policy moves it no more until scavctl move %s --unpin", words.Config(j.Config), reason, j.ID)
	}
	return fmt.Sprintf("unpinned (%s): the policy may move it again", reason)
}

// errAlreadyThere answers a controller whose verdict names the
// configuration the job already runs at.
var errAlreadyThere = errors.New("the job already runs at that configuration")

// errPinned answers a controller whose verdict would move a pinned job.
var errPinned = errors.New("the job is pinned at its configuration (scavctl move --unpin releases it)")

// sameConfig reports whether a and b are one configuration (the LR scale
// follows the batch).
func sameConfig(a, b plugins.Config) bool {
	return a.Workers == b.Workers && a.GlobalBatch == b.GlobalBatch && a.MachineType == b.MachineType && a.Market == b.Market
}

// verdict records a decision of the job's controller and, when it names
// another configuration, moves the job there, unless the job is pinned.
func (w *watch) verdict(v control.Verdict) {
	if v.Stop != "" { // a limit is reached: checkpoint and stop
		w.r.log.Info("stopping: a limit of the job is reached", zap.String("why", v.Stop))
		if !w.out.stopped {
			w.out.limit = v.Stop
		}
		w.stop(w.grace)
		return
	}
	j := &w.r.rec.job
	dec := addDecision(j, v.Decision)
	w.r.save(w.kill)
	w.r.decided(w.n, dec)
	if dec.To == j.Config {
		// Already there: a user's move may have taken the job where a
		// controller with an older view wanted it. A controller that
		// asked for a move waits for its reply; it hears that none was
		// needed (one that did not ask, takes none).
		select {
		case v.Reply <- errAlreadyThere:
		default:
		}
		return
	}
	if j.Pinned { // decided before the controller heard of the pin
		v.Reply <- errPinned
		return
	}
	w.r.log.Info("moving", zap.Int("workers", dec.To.Workers), zap.Int("batch", dec.To.GlobalBatch), zap.String("reason", dec.Reason))
	m := moveReq{cfg: dec.To, reason: dec.Reason, decided: true, reply: v.Reply} // the controller hears how it ends
	if err := w.move(m); err != nil {
		w.r.log.Warn("move", zap.Error(err))
		w.r.event(telemetry.EventMoved, w.n, fmt.Sprintf("the move to %s failed: %v", words.Config(dec.To), err))
		m.fail(err)
	}
}

// preempt turns a worker's pre-emption notice (its scheduler is about to
// end the allocation) into a move at the same configuration: the workers
// checkpoint, and the next attempt resumes from it. Every rank sends one;
// the first for this attempt acts.
func (w *watch) preempt(rec telemetry.StepRecord) {
	if rec.Attempt != w.n || w.preempted {
		return
	}
	w.preempted = true
	if w.out.stopped || w.r.g.shuttingDown() { // the stop checkpoints the job anyway
		return
	}
	w.r.log.Info("pre-emption notice; checkpointing and relaunching", zap.Int("attempt", rec.Attempt), zap.Int("rank", rec.Rank), zap.String("signal", rec.ID))
	m := moveReq{cfg: w.r.rechooseAfterNotice(w.kill, rec, w.r.rec.job.Config), reason: fmt.Sprintf("pre-empted: rank %d received %s from the scheduler", rec.Rank, rec.ID), reply: make(chan error, 1)}
	if err := w.move(m); err != nil {
		w.r.log.Warn("pre-empted job could not checkpoint", zap.Error(err))
	}
}
