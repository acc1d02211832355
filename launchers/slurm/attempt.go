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

	"github.com/scavenger-ml/scavenger/launchers/supervisor"
	"github.com/scavenger-ml/scavenger/plugins"
)

// stderrKeep is how many of srun's own lines an attempt keeps for errors.
const stderrKeep = 20

// attempt is a started attempt in either mode; it implements
// plugins.Handle with its Supervisor and supervisor.Ranks with scancel.
type attempt struct {
	*supervisor.Supervisor
	l      *Launcher
	spec   plugins.AttemptSpec
	n      int // tasks
	logger *zap.Logger
	batch  bool // submitted with sbatch

	events chan event     // from the readers (step) or the watcher (batch); closed at the end
	ready  chan struct{}  // step mode: the step and every task have started
	srun   *srunProcess   // step mode
	dir    string         // batch mode: script and output files
	parser [2]*lineParser // stdout, stderr

	// Owned by the supervisor's goroutine (handle and Finish).
	pids     []int  // each task's pid, as it reported it
	started  []bool // the tasks that reported their pid
	stepSeen bool
	srunCode int // srun's exit status, -1 while unknown
	isReady  bool

	mu        sync.Mutex
	jobID     string    // the Slurm job
	step      string    // "<job>.<step>" once srun reported it
	srunLines []string  // srun's last unlabelled lines
	lastJob   jobInfo   // batch mode: the last state read
	nodeList  string    // the nodes the attempt runs on: the allocation's (step), the last run's (batch)
	nodesLost []string  // batch mode: the nodes whose failure requeued the job, which was then cancelled
	nodesFail []string  // the nodes srun reported failed ("srun: error: Node failure on NODE")
	cancelAt  time.Time // batch mode: when the watcher cancels a job still running after SIGKILL
	lost      error     // batch mode: the job vanished
}

var (
	_ plugins.Handle   = (*attempt)(nil)
	_ supervisor.Ranks = (*attempt)(nil)
)

// Outlives reports whether the attempt goes on without the daemon that
// started it: a submitted batch job does (a restarted daemon reattaches to
// it with Recover); a job step ends with its srun.
func (a *attempt) Outlives() bool { return a.batch }

// newAttempt returns an attempt of n tasks, submitted as a batch job or
// (not batch) run as a step of an allocation.
func newAttempt(l *Launcher, spec plugins.AttemptSpec, n int, batch bool) *attempt {
	a := &attempt{
		l: l, spec: spec, n: n, batch: batch,
		logger:   l.logger.With(zap.String("job", spec.JobID), zap.Int("attempt", spec.Attempt)),
		events:   make(chan event, 64),
		ready:    make(chan struct{}),
		pids:     make([]int, n),
		started:  make([]bool, n),
		srunCode: -1,
	}
	// A batch job's failed rank is left to srun's --kill-on-bad-exit.
	cfg := supervisor.Config{N: n, Grace: l.opts.Grace, LeavePeers: batch, Logger: a.logger}
	a.Supervisor = supervisor.New(cfg, a)
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
	if node, ok := strings.CutPrefix(line, nodeFailure); ok {
		// srun may then exit 0, as if the tasks on the node had.
		a.mu.Lock()
		a.nodesFail = append(a.nodesFail, strings.TrimSpace(node))
		a.mu.Unlock()
	}
	if stream == plugins.Stderr && strings.TrimSpace(line) != "" && keep {
		a.mu.Lock()
		a.srunLines = append(a.srunLines, line)
		if len(a.srunLines) > stderrKeep {
			a.srunLines = a.srunLines[len(a.srunLines)-stderrKeep:]
		}
		a.mu.Unlock()
	}
}

// nodeFailure begins the line srun prints when Slurm tells it that a node
// of its step failed.
const nodeFailure = "srun: error: Node failure on "

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

// String names the attempt in errors.
func (a *attempt) String() string {
	return fmt.Sprintf("job %s attempt %d (slurm %s)", a.spec.JobID, a.spec.Attempt, a.ID())
}

// Deliver sends sig to every process of the attempt's tasks with scancel.
func (a *attempt) Deliver(ctx context.Context, sig syscall.Signal) error {
	return a.signalTasks(ctx, sig)
}

// Escalate stops the tasks: terminate for SIGTERM, kill for SIGKILL.
func (a *attempt) Escalate(ctx context.Context, sig syscall.Signal) {
	if sig == unix.SIGKILL {
		a.kill(ctx)
		return
	}
	a.terminate(ctx)
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

// supervise runs the attempt to its end over the events of its readers
// (step) or its watcher (batch).
func (a *attempt) supervise() { supervisor.Run(a.Supervisor, a.events, a.handle) }

// handle applies one event, on the supervisor's goroutine.
func (a *attempt) handle(t *supervisor.Tally, ev event) {
	switch ev.kind {
	case evStep:
		a.setStep(ev.step)
		a.logger.Debug("step launched", zap.String("slurm_step", ev.step))
	case evPID:
		r := ev.ranks[0]
		a.pids[r], a.started[r] = ev.pid, true
		if ev.step != "" && !a.stepSeen {
			a.setStep(ev.step)
		}
	case evRun:
		if ev.n > 0 {
			a.logger.Info("job requeued: a new run began", zap.Int("restart_count", ev.n))
		}
		a.mu.Lock()
		a.step = ""
		a.mu.Unlock()
		// A new run: results start over. The pids stay (the two files are
		// read in turn, so this run's pids may already be in); each run's
		// tasks report theirs anew.
		t.Restart()
		a.srunCode = -1
		return
	case evEnd:
		a.srunCode = ev.n
		return
	case evExit:
		for _, r := range ev.ranks {
			t.Exit(supervisor.Exit{Rank: r, Result: ev.res})
		}
	}
	a.checkReady(t)
}

func (a *attempt) setStep(step string) {
	a.mu.Lock()
	a.step = step
	a.mu.Unlock()
	a.stepSeen = true
}

// checkReady closes ready once the step is known (step mode) and every
// task has started or ended.
func (a *attempt) checkReady(t *supervisor.Tally) {
	if a.isReady || (!a.stepSeen && !a.batch) {
		return
	}
	for r := range a.started {
		if !a.started[r] && !t.Ended(r) {
			return
		}
	}
	a.isReady = true
	close(a.ready)
}

// Finish runs once the events are all in: srun has exited (step) or the
// job reached a final state (batch). It fills in the tasks' pids and says
// how the ranks Slurm said nothing about ended: the step never started
// them, or this srun does not print a verbose "Completed" line for tasks
// that exit 0 (then srun's own status, 0, says they did).
func (a *attempt) Finish(ctx context.Context, ranks []plugins.RankResult) supervisor.End {
	a.mu.Lock()
	lost, job, nodesLost, nodesFail := a.lost, a.lastJob, a.nodesLost, a.nodesFail
	a.mu.Unlock()
	srunCode := a.srunCode
	if !a.batch && a.srun != nil { // its Wait returned before events closed
		var ee *exec.ExitError
		switch {
		case a.srun.waitErr == nil:
			srunCode = 0
		case errors.As(a.srun.waitErr, &ee) && ee.ExitCode() > 0:
			srunCode = ee.ExitCode()
		}
	}
	for r, pid := range a.pids {
		ranks[r].PID = pid
	}
	a.logger.Debug("slurm attempt ended", zap.String("slurm_state", job.State), zap.Int("srun_code", srunCode))
	end := supervisor.End{Unreported: plugins.RankResult{ExitCode: 255}}
	switch {
	case srunCode == 0 && lost == nil:
		end.Unreported.ExitCode = 0
	case a.batch && job.ExitSignal > 0:
		end.Unreported = supervisor.Signaled(syscall.Signal(job.ExitSignal))
	case a.batch && job.ExitCode != 0:
		end.Unreported.ExitCode = job.ExitCode
	case !a.batch && srunCode > 0:
		end.Unreported.ExitCode = srunCode
	}
	if lost != nil {
		end.Err = lost
	}
	switch {
	case len(nodesLost) > 0:
		end.LostHosts = nodesLost
	case len(nodesFail) > 0 || srunCode != 0 || lost != nil || job.State == "NODE_FAIL":
		end.LostHosts = a.lostHosts(ctx)
		for _, n := range nodesFail {
			if !slices.Contains(end.LostHosts, n) {
				end.LostHosts = append(end.LostHosts, n)
			}
		}
	}
	if len(end.LostHosts) > 0 && end.Unreported.ExitCode == 0 && end.Unreported.Signal == "" {
		end.Unreported.ExitCode = 255 // the tasks on a lost node never reported their end
	}
	return end
}

// lostHosts returns the attempt's nodes that Slurm reports lost, for an
// attempt that failed.
func (a *attempt) lostHosts(ctx context.Context) []string {
	a.mu.Lock()
	list := a.nodeList
	a.mu.Unlock()
	lost, err := a.l.lostNodes(ctx, list)
	if err != nil {
		a.logger.Warn("cannot tell whether the attempt's nodes were lost", zap.String("nodes", list), zap.Error(err))
		return nil
	}
	if len(lost) > 0 {
		a.logger.Warn("nodes lost during the attempt", zap.Strings("lost", lost), zap.String("nodes", list))
	}
	return lost
}

// terminate sends SIGTERM to the tasks, or cancels what has not started.
func (a *attempt) terminate(ctx context.Context) {
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
func (a *attempt) kill(ctx context.Context) {
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
