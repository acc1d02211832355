package jobs

import (
	"math"
	"sync"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// progress follows the current attempt of a job from its step records. The
// job's step subscription writes it; the runner folds it into the record
// when it commits, and the output reader, the metrics and the checkpoint
// requests read it. It is not the record: only the runner writes that.
type progress struct {
	mu      sync.Mutex
	attempt int
	// first and last bound the steps this attempt completed (0: none);
	// firstAt is when its first step record arrived.
	first, last int64
	firstAt     time.Time
	// lastStep and lastTime are rank 0's newest step and its time;
	// stepTime the smoothed seconds per step (0: unknown).
	lastStep           int64
	lastTime, stepTime float64
	// stepped: the workers report steps themselves.
	stepped bool
	// synth numbers the steps read off the output of an uninstrumented job.
	synth int64
	// noise is the gradient noise scale the controller last estimated (0: none).
	noise float64
	// loss is rank 0's newest reported loss (nil: none this attempt).
	loss *float64
	// lastAt is when the newest step record of any rank arrived; slowest
	// the longest step any rank reported (seconds), for the watchdog.
	lastAt  time.Time
	slowest float64
	// badStep and bad are where the loss first turned NaN or infinite
	// this attempt (bad nil: it has not).
	badStep int64
	bad     *float64
}

// Progress is what a job's steps tell of it now.
type Progress struct {
	// LastStep is the newest step rank 0 completed.
	LastStep int64
	// StepTime is the smoothed seconds per step (0: unknown).
	StepTime float64
	// Stepped: the workers of the current attempt report steps themselves.
	Stepped bool
	// Noise is the latest gradient noise scale estimate (0: none).
	Noise float64
	// Loss is the training loss of rank 0's newest step that reported one
	// (nil: none yet in this attempt).
	Loss *float64
	// LastAt is when the newest step record of any rank arrived (zero:
	// none this attempt); Slowest the longest step reported, in seconds.
	LastAt  time.Time
	Slowest float64
	// BadLoss is the first loss of this attempt that was NaN or infinite,
	// at step BadStep (nil: none was).
	BadLoss *float64
	BadStep int64
}

// begin starts following attempt, which goes on from step startStep (and
// has run first..last already when it is being reattached to).
func (p *progress) begin(attempt int, startStep, first, last int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempt, p.first, p.last, p.firstAt = attempt, first, last, time.Time{}
	p.lastStep, p.lastTime, p.stepTime, p.stepped = max(startStep, last), 0, 0, false
	p.loss, p.lastAt, p.slowest, p.bad, p.badStep = nil, time.Time{}, 0, nil, 0
}

// saw takes one step record.
func (p *progress) saw(rec telemetry.StepRecord) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rec.Attempt != p.attempt || p.attempt == 0 {
		return
	}
	if p.first == 0 || rec.Step < p.first {
		p.first = rec.Step
		if p.firstAt.IsZero() {
			p.firstAt = time.Now()
		}
	}
	p.last = max(p.last, rec.Step)
	if rec.From == "" {
		p.stepped = true
	}
	p.lastAt = time.Now()
	if rec.Seconds > 0 && !math.IsInf(rec.Seconds, 0) {
		p.slowest = max(p.slowest, rec.Seconds)
	}
	if l := rec.Loss; l != nil && (math.IsNaN(*l) || math.IsInf(*l, 0)) && p.bad == nil {
		p.bad, p.badStep = l, rec.Step
	}
	if rec.Rank != 0 || rec.Step <= p.lastStep {
		return
	}
	switch {
	case p.lastTime > 0 && rec.Step == p.lastStep+1 && rec.Time > p.lastTime:
		dt := rec.Time - p.lastTime
		if p.stepTime == 0 {
			p.stepTime = dt
		} else {
			p.stepTime = 0.8*p.stepTime + 0.2*dt
		}
	case p.stepTime == 0 && rec.Seconds > 0:
		// The first record of an attempt: its own step time, so that a
		// move asked for this early leads by time (moveLeadTime), not by
		// two steps the ranks may have passed already.
		p.stepTime = rec.Seconds
	}
	p.lastStep, p.lastTime = rec.Step, rec.Time
	if rec.Loss != nil {
		p.loss = rec.Loss
	}
}

// sawStep reports whether the current attempt has reported a step.
func (p *progress) sawStep() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first != 0
}

// now returns the progress so far.
func (p *progress) now() Progress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Progress{LastStep: p.lastStep, StepTime: p.stepTime, Stepped: p.stepped, Noise: p.noise, Loss: p.loss,
		LastAt: p.lastAt, Slowest: p.slowest, BadLoss: p.bad, BadStep: p.badStep}
}

// claimSteps takes n step numbers for steps read off the output and returns
// the first, or 0 once the workers report steps themselves.
func (p *progress) claimSteps(n int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stepped {
		return 0
	}
	p.synth = max(p.synth, p.lastStep)
	first := p.synth + 1
	p.synth += n
	return first
}

// setNoise records the latest gradient noise scale estimate.
func (p *progress) setNoise(v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return
	}
	p.mu.Lock()
	p.noise = v
	p.mu.Unlock()
}

// fold writes the current attempt's steps into j: its first and last step,
// and, when the attempt before it ended in a move, the time from the start
// to the first step.
func (p *progress) fold(j *api.Job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := len(j.Attempts)
	if k == 0 || j.Attempts[k-1].Attempt != p.attempt {
		return
	}
	a := &j.Attempts[k-1]
	a.FirstStep, a.LastStep = p.first, max(a.LastStep, p.last)
	if k > 1 && !p.firstAt.IsZero() {
		if prev := &j.Attempts[k-2]; prev.Move != nil && prev.Move.FirstStep == 0 {
			prev.Move.FirstStep = p.firstAt.Sub(a.Started).Seconds()
		}
	}
}
