package slurm

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/plugins"
)

// stderrKeep is how many of srun's own lines an attempt keeps for errors.
const stderrKeep = 20

// attempt is a started attempt in either mode; it implements plugins.Handle.
type attempt struct {
	l      *Launcher
	spec   plugins.AttemptSpec
	n      int // tasks
	logger *zap.Logger
	batch  bool // submitted with sbatch

	events chan event            // from the readers (step) or the watcher (batch); closed at the end
	stops  *plugins.StopRequests // Stop calls, for the supervisor
	ready  chan struct{}         // step mode: the step and every task have started
	done   chan struct{}         // the Result is published
	over   chan struct{}         // the events are all in (closed with events' close)
	srun   *srunProcess          // step mode
	dir    string                // batch mode: script and output files
	parser [2]*lineParser        // stdout, stderr

	mu        sync.Mutex
	jobID     string // the Slurm job
	step      string // "<job>.<step>" once srun reported it
	stopping  bool
	finished  bool
	srunLines []string  // srun's last unlabelled lines
	lastJob   jobInfo   // batch mode: the last state read
	cancelAt  time.Time // batch mode: when the watcher cancels a job still running after SIGKILL
	lost      error     // batch mode: the job vanished
	result    plugins.Result
	resultErr error
	readyOnce sync.Once
}

var _ plugins.Handle = (*attempt)(nil)

// Outlives reports whether the attempt goes on without the daemon that
// started it: a submitted batch job does (a restarted daemon reattaches to
// it with Recover); a job step ends with its srun.
func (a *attempt) Outlives() bool { return a.batch }

func newAttempt(l *Launcher, spec plugins.AttemptSpec, n int) *attempt {
	a := &attempt{
		l: l, spec: spec, n: n,
		logger: l.logger.With(zap.String("job", spec.JobID), zap.Int("attempt", spec.Attempt)),
		events: make(chan event, 64),
		stops:  plugins.NewStopRequests(),
		ready:  make(chan struct{}),
		done:   make(chan struct{}),
	}
	for i := range a.parser {
		a.parser[i] = &lineParser{n: n, out: spec.Output, emit: a.emit, other: a.other, cont: -1}
	}
	return a
}

// emit hands an event to the supervisor.
func (a *attempt) emit(ev event) { a.events <- ev }

// other logs an unlabelled line (srun's or Slurm's own) and keeps srun's
// last lines for error messages.
func (a *attempt) other(stream plugins.Stream, line string) {
	a.logger.Debug("slurm output", zap.String("stream", string(stream)), zap.String("line", line))
	keep := strings.Contains(line, "error") || !strings.HasPrefix(line, "srun: ")
	if stream == plugins.Stderr && strings.TrimSpace(line) != "" && keep {
		a.mu.Lock()
		a.srunLines = append(a.srunLines, line)
		if len(a.srunLines) > stderrKeep {
			a.srunLines = a.srunLines[len(a.srunLines)-stderrKeep:]
		}
		a.mu.Unlock()
	}
}

// slurmSays returns srun's kept error lines, for error messages.
func (a *attempt) slurmSays() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.srunLines) == 0 {
		return "(srun printed no error)"
	}
	return strings.Join(a.srunLines, "; ")
}

// ID is "<job>.<step>" inside an allocation and "<job>" for a submitted job.
func (a *attempt) ID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.batch {
		return a.jobID
	}
	return a.step
}

func (a *attempt) what() string {
	return fmt.Sprintf("job %s attempt %d (slurm %s)", a.spec.JobID, a.spec.Attempt, a.ID())
}

// Wait blocks until the attempt has finished and returns its Result; every
// call gets the same Result. It returns ctx's error if ctx ends first.
func (a *attempt) Wait(ctx context.Context) (plugins.Result, error) {
	select {
	case <-a.done:
		a.mu.Lock()
		defer a.mu.Unlock()
		r := a.result
		r.Ranks = slices.Clone(r.Ranks)
		return r, a.resultErr
	case <-ctx.Done():
		return plugins.Result{}, fmt.Errorf("wait for %s: %w", a.what(), ctx.Err())
	}
}

// Signal sends sig to every process of the attempt's tasks with scancel.
// It fails with plugins.ErrStopped once the attempt is being stopped and
// with plugins.ErrFinished once it has ended.
func (a *attempt) Signal(ctx context.Context, sig syscall.Signal) error {
	a.mu.Lock()
	finished, stopping := a.finished, a.stopping
	a.mu.Unlock()
	name := unix.SignalName(sig)
	switch {
	case finished:
		return fmt.Errorf("signal %s to %s: %w", name, a.what(), plugins.ErrFinished)
	case stopping:
		return fmt.Errorf("signal %s to %s: %w", name, a.what(), plugins.ErrStopped)
	}
	if err := a.signalTasks(ctx, sig); err != nil {
		return fmt.Errorf("signal %s to %s: %w", name, a.what(), err)
	}
	return nil
}

// signalTasks sends sig to the step (step mode) or to the job's steps
// (batch mode: scancel without --batch leaves the batch shell alone).
//
// A batch job's step is signalled by its id once srun reported it: to
// Slurm, `scancel --signal=KILL <job>` is a cancellation of the whole job,
// which kills srun before its tasks' exits reach it.
func (a *attempt) signalTasks(ctx context.Context, sig syscall.Signal) error {
	a.mu.Lock()
	target, jobID := a.step, a.jobID
	a.mu.Unlock()
	if target == "" && a.batch {
		// The step is not known (yet): signal the job's steps if it runs.
		// Not a pending job: scancel --signal on one retries for a minute.
		j, err := a.l.job(ctx, jobID)
		if err != nil {
			return err
		}
		if j.State != "RUNNING" {
			return fmt.Errorf("%w: job %s is %s", ErrStepStart, jobID, j.State)
		}
		target = jobID
	}
	if target == "" {
		return fmt.Errorf("%w: the step has not started", ErrStepStart)
	}
	_, err := a.l.run(ctx, a.l.opts.Scancel, "--signal="+strings.TrimPrefix(unix.SignalName(sig), "SIG"), target)
	return err
}

// Stop sends SIGTERM to every task, SIGKILL when grace has passed (at once
// for grace <= 0), and returns when the attempt has ended. A later call
// with a shorter grace brings the SIGKILL forward. If ctx ends first Stop
// returns its error and the stop goes on. Stopping a finished attempt does
// nothing.
func (a *attempt) Stop(ctx context.Context, grace time.Duration) error {
	if err := a.stops.Stop(ctx, grace, a.done); err != nil {
		return fmt.Errorf("stop %s: %w", a.what(), err)
	}
	return nil
}

// supervise consumes the events of the attempt until the last one, stops
// the attempt when a rank fails or Stop is called, and publishes the Result.
func (a *attempt) supervise() {
	defer close(a.done)
	var (
		results    = make([]plugins.RankResult, a.n)
		ended      = make([]bool, a.n)
		started    = make([]bool, a.n)
		running    = a.n
		failedRank = -1
		stopByCall bool
		esc        plugins.Escalation
		stepSeen   bool
		srunCode   = -1
	)
	defer esc.Close()
	for i := range results {
		results[i].Rank = i
	}
	checkReady := func() {
		if !stepSeen && !a.batch {
			return
		}
		for i := range started {
			if !started[i] && !ended[i] {
				return
			}
		}
		a.readyOnce.Do(func() { close(a.ready) })
	}
	beginStop := func(deadline time.Time) {
		if esc.Begin(deadline) {
			a.mu.Lock()
			a.stopping = true
			a.mu.Unlock()
			a.terminate()
		}
	}
	events := a.events
loop:
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				break loop
			}
			switch ev.kind {
			case evStep:
				a.mu.Lock()
				a.step = ev.step
				a.mu.Unlock()
				stepSeen = true
				a.logger.Debug("step launched", zap.String("slurm_step", ev.step))
				checkReady()
			case evPID:
				r := ev.ranks[0]
				results[r].PID = ev.pid
				started[r] = true
				if ev.step != "" && !stepSeen {
					a.mu.Lock()
					a.step = ev.step
					a.mu.Unlock()
					stepSeen = true
				}
				checkReady()
			case evRun:
				if ev.n > 0 {
					a.logger.Info("job requeued: a new run began", zap.Int("restart_count", ev.n))
				}
				a.mu.Lock()
				a.step = ""
				a.mu.Unlock()
				// A new run: results start over. The pids stay (the
				// two files are read in turn, so this run's pids may
				// already be in); each run's tasks report theirs anew.
				for i := range results {
					results[i] = plugins.RankResult{Rank: i, PID: results[i].PID}
					ended[i] = false
				}
				running, failedRank, srunCode = a.n, -1, -1
			case evEnd:
				srunCode = ev.n
			case evExit:
				for _, r := range ev.ranks {
					if r < 0 || r >= a.n || ended[r] {
						continue
					}
					ended[r] = true
					running--
					pid := results[r].PID
					results[r] = ev.res
					results[r].Rank, results[r].PID = r, pid
					switch {
					case esc.Stopping() || failedRank >= 0:
						results[r].Stopped = true
					case ev.res.ExitCode != 0:
						failedRank = r
						if running > 0 && !a.batch {
							a.logger.Warn("rank failed; stopping the others", zap.Int("rank", r),
								zap.Int("exit_code", ev.res.ExitCode), zap.Duration("grace", a.l.opts.Grace))
							beginStop(time.Now().Add(a.l.opts.Grace))
						}
					}
				}
				checkReady()
			}
		case <-a.stops.C():
			deadline := a.stops.Deadline()
			if !stopByCall {
				stopByCall = true
				a.logger.Info("stopping attempt", zap.Duration("grace", time.Until(deadline).Round(time.Millisecond)))
			}
			beginStop(deadline)
		case <-esc.Due():
			esc.Fired()
			a.logger.Warn("grace over; killing the tasks")
			a.kill()
		}
	}
	a.mu.Lock()
	a.finished = true
	lost, job := a.lost, a.lastJob
	a.mu.Unlock()
	if !a.batch && a.srun != nil { // its Wait returned before events closed
		var ee *exec.ExitError
		switch {
		case a.srun.waitErr == nil:
			srunCode = 0
		case errors.As(a.srun.waitErr, &ee) && ee.ExitCode() > 0:
			srunCode = ee.ExitCode()
		}
	}

	// Ranks Slurm said nothing about: the step never started them, they
	// were killed with the job, or this srun does not print a verbose
	// "Completed" line for tasks that exit 0 (then srun's own status, 0,
	// says they did).
	wasStopping := esc.Stopping() || failedRank >= 0
	for r := range results {
		if ended[r] {
			continue
		}
		switch {
		case wasStopping:
			results[r].Stopped = true
			results[r].ExitCode, results[r].Signal = 128+int(unix.SIGKILL), "SIGKILL"
		case srunCode == 0 && lost == nil:
			results[r].ExitCode = 0
		case a.batch && job.ExitSignal > 0:
			s := syscall.Signal(job.ExitSignal)
			results[r].ExitCode, results[r].Signal = 128+int(s), unix.SignalName(s)
		case a.batch && job.ExitCode != 0:
			results[r].ExitCode = job.ExitCode
		case !a.batch && srunCode > 0:
			results[r].ExitCode = srunCode
		default:
			results[r].ExitCode = 255
		}
		if !results[r].Stopped && results[r].ExitCode != 0 && failedRank < 0 {
			failedRank = r
		}
	}
	res := plugins.Result{FailedRank: failedRank, Stopped: stopByCall, Ranks: results}
	if failedRank >= 0 {
		res.ExitCode = results[failedRank].ExitCode
	}
	a.mu.Lock()
	a.result = res
	if lost != nil {
		a.resultErr = fmt.Errorf("%s: %w", a.what(), lost)
	}
	a.mu.Unlock()
	a.logger.Info("attempt finished", zap.Int("exit_code", res.ExitCode), zap.Int("failed_rank", res.FailedRank),
		zap.Bool("stopped", res.Stopped), zap.String("slurm_state", job.State), zap.NamedError("lost", lost))
}

// terminate sends SIGTERM to the tasks, or cancels what has not started.
func (a *attempt) terminate() {
	ctx := context.Background()
	if a.batch {
		a.mu.Lock()
		noStep := a.step == "" // pending, or srun not seen yet
		a.mu.Unlock()
		if noStep {
			// Nothing to give a grace to: cancel the job (Slurm still
			// sends a task that just started SIGTERM, then SIGKILL after
			// its KillWait).
			a.cancelJob(ctx)
			return
		}
		if err := a.signalTasks(ctx, unix.SIGTERM); err != nil {
			a.logger.Debug("SIGTERM to the steps", zap.Error(err))
		}
		return
	}
	if a.ID() == "" { // srun still waits for its step: let it give up
		a.srun.signal(unix.SIGTERM)
		return
	}
	if err := a.signalTasks(ctx, unix.SIGTERM); err != nil {
		a.logger.Debug("SIGTERM to the step", zap.Error(err))
	}
}

// kill sends SIGKILL to the tasks. A batch job is left to end by itself
// (srun exits, then the script) and cancelled by the watcher only if it
// still runs batchCancelDelay later: cancelling it at once kills srun
// before its tasks' exits reach it, and slurmstepd then retries for
// seconds before the job can complete.
func (a *attempt) kill() {
	ctx := context.Background()
	if a.batch {
		if err := a.signalTasks(ctx, unix.SIGKILL); err != nil {
			a.logger.Debug("SIGKILL to the steps", zap.Error(err))
		}
		a.mu.Lock()
		a.cancelAt = time.Now().Add(batchCancelDelay)
		a.mu.Unlock()
		return
	}
	if a.ID() == "" {
		a.srun.signal(unix.SIGKILL)
		return
	}
	if err := a.signalTasks(ctx, unix.SIGKILL); err != nil {
		// slurmctld does not answer: kill srun, or Stop would wait on it forever.
		a.logger.Warn("SIGKILL to the step failed; killing srun", zap.Error(err))
		a.srun.signal(unix.SIGKILL)
	}
}
