package jobs

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/words"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// The exit status a job that did not finish ends with: 143 (128+SIGTERM)
// when it was stopped, 137 (128+SIGKILL) when it had to be killed; the
// shell's convention, so that `scavctl run ... && next` never goes on from
// an unfinished job.
const (
	exitStopped = 143
	exitKilled  = 137
)

// maxHostLosses bounds the relaunches after lost hosts in one run of a job,
// so that a flapping network cannot relaunch it forever.
const maxHostLosses = 3

// after settles the end of one attempt: a move or a lost host sets p to the
// next attempt (done false); anything else is the job's ending (done true).
func (r *runner) after(kill, shutdown context.Context, out outcome, p *plan, hostLosses *int) (ending, bool) {
	if out.detached {
		return ending{detached: true}, true
	}
	r.g.drainSpool(kill, r.rec.job, true)
	r.lostHosts = r.lostHosts || len(out.res.LostHosts) > 0
	if n := removeTemporaries(r.rec.job); n > 0 {
		r.log.Info("removed the temporary files of checkpoint writes the workers did not finish", zap.Int("files", n))
	}
	if out.moved != nil && out.err == nil {
		return r.moved(kill, shutdown, out, p)
	}
	if len(out.res.LostHosts) > 0 && !out.stopped && *hostLosses < maxHostLosses {
		if next, ok := r.afterHostLoss(kill, p.cfg, out.res.LostHosts); ok {
			*hostLosses++
			restore, step := r.latestCheckpoint()
			from := "the start (no checkpoint was written)"
			if restore != "" {
				from = fmt.Sprintf("the checkpoint of step %d", step)
			}
			lost := strings.Join(out.res.LostHosts, ", ")
			r.endAttempt(kill, "failed: lost host "+lost, nil)
			r.save(kill)
			r.event(telemetry.EventMoved, p.attempt, fmt.Sprintf("lost host %s; relaunching at %s from %s",
				lost, words.Config(next), from))
			r.log.Warn("host lost; relaunching on the others", zap.Strings("lost", out.res.LostHosts), zap.Int("workers", next.Workers))
			p.cfg, p.prev, p.restore, p.step = next, nil, restore, step
			return ending{}, false
		}
	}
	v := restartAfter(r.crashOf(out, shutdown))
	if out.err == nil && v.Restart {
		return r.restart(kill, shutdown, v, p)
	}
	e := r.conclude(out)
	if out.err == nil && v.Crashed {
		e.msg, e.why = v.Reason, "crashed: "+v.Reason
		if out.stalled > 0 && !out.stopped { // the watchdog stopped it: a crash, not a stop
			e.state, e.code = api.StateFailed, exitKilled
		}
		if len(out.res.Ranks) > 1 {
			e.msg += "; the other workers were stopped"
		}
	}
	return e, true
}

// earlyCrash bounds how long after its start an attempt that reported no
// step may end and still count as crashing before its first step (an
// uninstrumented job reports none, whenever it crashes).
const earlyCrash = time.Minute

// crashOf is what the restart policy is told of the attempt that ended
// with out; it remembers whether that attempt crashed early, for the next.
func (r *runner) crashOf(out outcome, shutdown context.Context) crash {
	j := &r.rec.job
	c := crash{Result: out.res, Stopped: out.stopped, Closing: r.g.shuttingDown() || shutdown.Err() != nil,
		Restarts: j.Restarts, MaxRestarts: j.MaxRestarts, Window: j.Faults.Window(), PrevEarly: r.earlyExit, Stalled: out.stalled}
	var began time.Time
	if k := len(j.Attempts); k > 0 {
		began = j.Attempts[k-1].Started
	}
	c.Early = out.res.ExitCode != 0 && out.stalled == 0 && !r.prog.sawStep() && !began.IsZero() && time.Since(began) < earlyCrash
	if r.g.o.Launcher.Name() == "local" && out.res.ExitCode != 0 {
		c.OOM = oomRanks(out.res, began)
	}
	r.earlyExit = nil
	if c.Early {
		code := out.res.ExitCode
		r.earlyExit = &code
	}
	return c
}

// restart records the crash of attempt p and plans the next one at the same
// configuration, from the job's last complete checkpoint, after the
// verdict's back-off; a stop that comes meanwhile ends the job there.
func (r *runner) restart(kill, shutdown context.Context, v restartVerdict, p *plan) (ending, bool) {
	restore, step := r.latestCheckpoint()
	from := "the start (no checkpoint was written)"
	if restore != "" {
		from = fmt.Sprintf("the checkpoint of step %d", step)
	}
	j := &r.rec.job
	j.Restarts++
	r.endAttempt(kill, "crashed: "+v.Reason, nil)
	r.save(kill)
	msg := fmt.Sprintf("%s, from %s", v.Reason, from)
	if v.Delay > 0 {
		msg += fmt.Sprintf(", in %s", v.Delay)
	}
	r.event(telemetry.EventRestarting, p.attempt, msg)
	r.log.Warn("attempt crashed; restarting", zap.Int("attempt", p.attempt), zap.String("reason", v.Reason), zap.Duration("backoff", v.Delay))
	p.prev, p.restore, p.step, p.note = nil, restore, step, msg
	t := time.NewTimer(v.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return ending{}, false
	case <-r.stops:
	case <-shutdown.Done():
	case <-kill.Done():
	}
	e := ending{state: api.StateStopped, msg: "stopped on request while waiting to restart after a crash"}
	if restore != "" {
		e.resume = &api.ResumePoint{Checkpoint: restore, Step: step}
		e.msg += fmt.Sprintf("; continue from the checkpoint of step %d with: scavctl run --resume %s", step, j.ID)
	}
	return e, true
}

// moved records the end of an attempt that checkpointed for a move and
// plans the next one, unless the job was asked to stop meanwhile.
func (r *runner) moved(kill, shutdown context.Context, out outcome, p *plan) (ending, bool) {
	r.endAttempt(kill, fmt.Sprintf("moved: %s", out.moved.reason), &out.timing)
	r.save(kill)
	msg := fmt.Sprintf("relaunching at %s from step %d", words.Config(out.moved.cfg), out.lastStep)
	if !out.moved.decided { // a policy's decision said why in its own event
		msg += ": " + out.moved.reason
	}
	r.event(telemetry.EventMoved, p.attempt, msg)
	prev := p.cfg
	p.cfg, p.prev, p.restore, p.step = out.moved.cfg, &prev, out.restore, out.lastStep
	stopped := shutdown.Err() != nil || kill.Err() != nil
	select {
	case <-r.stops:
		stopped = true
	default:
	}
	if !stopped {
		return ending{}, false
	}
	// Stopped between two attempts: keep the checkpoint for --resume.
	return ending{state: api.StateStopped, code: exitStopped, resume: &api.ResumePoint{Checkpoint: p.restore, Step: p.step},
		msg: fmt.Sprintf("stopped on request between two attempts, at the checkpoint of step %d", p.step)}, true
}

// afterHostLoss is the configuration to go on at after hosts were lost: the
// same, with no more workers than the launcher can still start, on no more
// nodes than it still has. ok is false when the launcher cannot say or has
// no room left.
func (r *runner) afterHostLoss(ctx context.Context, cfg plugins.Config, lost []string) (plugins.Config, bool) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	caps, err := r.g.o.Launcher.Capabilities(ctx)
	if err != nil {
		r.log.Warn("hosts lost and the launcher cannot report what is left; the job ends", zap.Strings("lost", lost), zap.Error(err))
		return cfg, false
	}
	next := cfg
	if caps.MaxWorkers > 0 && next.Workers > caps.MaxWorkers {
		next.Workers = caps.MaxWorkers
	}
	if next.Workers < 1 {
		return cfg, false
	}
	if n := len(caps.Hosts); n > 0 && next.Nodes > n {
		next.Nodes = n
	}
	if r.rec.job.Optimize.Active() && next.GlobalBatch%next.Workers != 0 {
		next.GlobalBatch -= next.GlobalBatch % next.Workers
	}
	return next, next.GlobalBatch >= next.Workers || next.GlobalBatch == 0
}

// conclude is the job's ending after its last attempt, with what its loss
// says of it: one whose last loss is NaN did not simply succeed.
func (r *runner) conclude(out outcome) ending {
	e := r.concludeExit(out)
	switch j := r.rec.job; {
	case out.nanStop && j.BadLoss != nil:
		e.msg = fmt.Sprintf("stopped: the loss turned %s at step %d (--on-nan stop); %s", j.BadLoss.Value, j.BadLoss.Step, e.msg)
	case e.state == api.StateSucceeded && r.lossNote() != "":
		e.msg += ", but " + r.lossNote()
	}
	return e
}

// concludeExit is the job's ending as its workers' exits tell it.
func (r *runner) concludeExit(out outcome) ending {
	if out.err != nil {
		return ending{state: api.StateFailed, code: 1, msg: fmt.Sprintf("wait: %v", out.err), why: "failed: " + out.err.Error()}
	}
	res := out.res
	e := ending{state: api.StateSucceeded, code: res.ExitCode, msg: "all workers exited 0", res: &res}
	stopped := out.stopped || res.Stopped
	switch {
	case stopped && out.acked && !out.killed:
		e.state, e.code = api.StateStopped, exitStopped
		e.msg = fmt.Sprintf("stopped %s after checkpointing step %d", out.stopCause(), out.lastStep)
		e.resume = &api.ResumePoint{Checkpoint: out.restore, Step: out.lastStep}
	case stopped:
		e.state, e.code = api.StateStopped, exitStopped
		e.msg = fmt.Sprintf("stopped %s at step %d", out.stopCause(), r.prog.now().LastStep)
		if out.killed {
			e.code = exitKilled
			e.msg = fmt.Sprintf("killed %s at step %d, before it had checkpointed", out.stopCause(), r.prog.now().LastStep)
		}
		if out.restore != "" {
			e.msg += fmt.Sprintf("; its last complete checkpoint is of step %d", out.lastStep)
			e.resume = &api.ResumePoint{Checkpoint: out.restore, Step: out.lastStep}
		}
	case res.ExitCode != 0:
		e.state = api.StateFailed
		e.msg = fmt.Sprintf("rank %d exited with %d", res.FailedRank, res.ExitCode)
		if len(res.Ranks) > 1 {
			e.msg += "; the other workers were stopped"
		}
	}
	return e
}
