package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

type runFlags struct {
	workers    string
	batch      string
	name       string
	checkpoint string
	env        []string
	grace      time.Duration
	mode       string
	statusTick time.Duration
	ckptSignal string
	stepRegex  string
	resume     string
	restarts   int

	policy        string
	objective     string
	deadline      time.Duration
	budget        float64
	targetSteps   int64
	targetSamples int64
	targetEpochs  float64
	datasetSize   int64
	price         float64
}

func newRunCmd(a *app) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run a training command under Scavenger and stream its output",
		Long: `run launches CMD as a data-parallel job: one process per worker with the
torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) and Scavenger's (SCAV_JOB_ID, SCAV_SOCKET,
SCAV_GLOBAL_BATCH, SCAV_LOCAL_BATCH, SCAV_CHECKPOINT_DIR, ...). The python
package "scavenger" is on the workers' PYTHONPATH; scripts that use it report
every step, and scripts that do not run unchanged.

Arguments may use {workers}, {batch_size} and {local_batch_size}; they are
replaced by the job's configuration. Commands that are launchers themselves
(torchrun, python -m torch.distributed.run) are started once, not per worker.

Output lines are prefixed with the worker's rank. On a terminal a status line
shows the step, samples/s, workers and global batch. Ctrl-C or SIGTERM stops
the job: SIGTERM to the workers, SIGKILL after --grace. scavctl exits with the
job's exit code.`,
		Example: `  scavctl run --workers 2 --batch-size 64 -- /usr/bin/python3 examples/cnn.py --steps 50
  scavctl run --workers 2 -- /usr/bin/python3 examples/plain_ddp.py
  scavctl run --workers 4 --mode self -- torchrun --nproc_per_node={workers} train.py --bs={local_batch_size}`,
		Args: func(cmd *cobra.Command, args []string) error {
			if resume, _ := cmd.Flags().GetString("resume"); resume != "" {
				if len(args) > 0 {
					return errors.New("--resume continues a job's own command: give no command")
				}
				return nil
			}
			if len(args) == 0 {
				return errors.New("no command: give it after --, e.g. scavctl run -- python train.py")
			}
			if cmd.ArgsLenAtDash() != 0 {
				return fmt.Errorf("unexpected argument %q before --: put the training command after --", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runJob(cmd.Context(), f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.workers, "workers", "w", "1", "data-parallel workers: N, or MIN:MAX for the optimizer to choose from (starting at MIN)")
	fl.StringVarP(&f.batch, "batch-size", "b", "0", "global batch, split evenly over the workers: B, or MIN:MAX (starting at MIN); 0: the script's own")
	fl.StringVar(&f.name, "name", "", "job name; the id is the name plus a random suffix (default: the script's name)")
	fl.StringVar(&f.checkpoint, "checkpoint-dir", "", "directory for the job's checkpoints (default: <state-dir>/checkpoints/<job>)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "extra environment for the workers, KEY=VALUE (repeatable)")
	fl.DurationVar(&f.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when the job is stopped")
	fl.StringVar(&f.mode, "mode", "auto", "how CMD becomes processes: ranks (one per worker), self (CMD launches the workers), auto")
	fl.StringVar(&f.ckptSignal, "checkpoint-signal", "", "for scripts without the python client: the signal (e.g. SIGUSR1) on which they checkpoint into $SCAV_CHECKPOINT_DIR and exit, so the job can be moved; they resume from $SCAV_RESTORE")
	fl.StringVar(&f.policy, "policy", "fixed", "how the job is moved: fixed (never), scavenger (the paper's partial search), adaptive (keeps re-optimising), full")
	fl.StringVar(&f.objective, "objective", "time", "what the policy optimises: time, cost or knee")
	fl.DurationVar(&f.deadline, "deadline", 0, "with --objective cost: finish within this time")
	fl.Float64Var(&f.budget, "budget", 0, "with --objective time: spend at most this many USD")
	fl.Int64Var(&f.targetSteps, "target-steps", 0, "the job's work: this many steps at the starting batch (the script gets SCAV_TARGET_SAMPLES)")
	fl.Int64Var(&f.targetSamples, "target-samples", 0, "the job's work in samples")
	fl.Float64Var(&f.targetEpochs, "target-epochs", 0, "the job's work in epochs of --dataset-size samples")
	fl.Int64Var(&f.datasetSize, "dataset-size", 0, "samples in one epoch (for --target-epochs)")
	fl.Float64Var(&f.price, "price", 0, "$/hour of this machine, for cost objectives (default 1)")
	fl.StringVar(&f.stepRegex, "step-regex", "", "for scripts without the python client: a regex that finds progress in their output, with named groups step, rate (it/s) or total (default: tqdm bars and \"step N\" lines)")
	fl.StringVar(&f.resume, "resume", "", "continue the stopped job JOB from its last checkpoint (no command needed)")
	fl.IntVar(&f.restarts, "max-restarts", api.DefaultMaxRestarts, "restart a job whose worker crashed (not stopped, not moved) this many times, from its last complete checkpoint, with back-off; 0: never")
	fl.DurationVar(&f.statusTick, "status-every", 10*time.Second, "interval of the plain status lines when stderr is not a terminal (0: none)")
	return cmd
}

// runJob submits the job, streams its output until it finishes and returns
// its exit code as an exitError.
func (a *app) runJob(ctx context.Context, f runFlags, args []string) error {
	var req api.RunRequest
	if f.resume == "" {
		var err error
		if req, err = buildRunRequest(f, args); err != nil {
			return err
		}
	}
	// Signals stop the job, not scavctl: install the handler before anything starts.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	c, release, err := a.connect(ctx, true)
	if err != nil {
		return err
	}
	defer release()
	job, first, err := submit(ctx, c, f, req)
	if err != nil {
		return err
	}
	con := newConsole(a.stdout, a.stderr, f.statusTick)
	defer con.close()
	con.notef("job %s: %d worker(s), global batch %s, checkpoints in %s", job.ID, job.Config.Workers, batchText(job.Config.GlobalBatch), job.CheckpointDir)

	st := newStepStatus(job.Config)
	feed, err := c.FollowSteps(job.ID, func(r telemetry.StepRecord) {
		st.observe(r)
		con.setStatus(st.line())
	})
	if err != nil {
		return err
	}
	defer feed.Close()

	watchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	interrupted := forwardSignals(watchCtx, c, job.ID, f.grace, sigs, con)
	final, err := followJob(watchCtx, c, job.ID, first, con, st)
	cancel()
	sig := <-interrupted
	if errors.Is(err, errDaemonLost) {
		con.notef("lost the connection to scavd (%s) for %s; job %s goes on if its launcher keeps it without scavd (jobs submitted to Slurm do, and a restarted scavd reattaches to them). Follow it with: scavctl status %[3]s; scavctl logs -f %[3]s",
			c.URL(), daemonLostAfter, job.ID)
		return exitError{exitDaemonLost}
	}
	if err != nil {
		return err
	}
	feed.Drain()
	con.setStatus(st.line())
	code := 0
	if final.ExitCode != nil {
		code = *final.ExitCode
	}
	con.notef("job %s finished: %s (exit %d); %s", job.ID, final.Message, code, st.summary())
	if sig, ok := sig.(syscall.Signal); ok && code == 0 {
		code = 128 + int(sig) // the shell's convention for a command ended by a signal
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}

// submit submits req, or with --resume resumes that job; first is the first
// attempt whose output is this command's.
func submit(ctx context.Context, c *api.Client, f runFlags, req api.RunRequest) (job api.Job, first int, err error) {
	if f.resume == "" {
		if job, err = c.Run(ctx, req); err != nil {
			return job, 0, fmt.Errorf("submit job: %w", err)
		}
		return job, 1, nil
	}
	env, err := workerEnv(f.env)
	if err != nil {
		return job, 0, err
	}
	if job, err = c.Resume(ctx, f.resume, env); err != nil {
		return job, 0, fmt.Errorf("resume job: %w", err)
	}
	return job, job.Attempt + 1, nil
}

// forwardSignals stops the job at the first signal (with grace) and kills it
// at the second, until ctx ends; the channel then gives the first signal
// (nil: none came).
func forwardSignals(ctx context.Context, c *api.Client, id string, grace time.Duration, sigs <-chan os.Signal, con *console) <-chan os.Signal {
	out := make(chan os.Signal, 1)
	go func() { // owned by the caller: it ends with ctx, and the caller reads out
		var first os.Signal
		defer func() { out <- first }()
		for {
			select {
			case <-ctx.Done():
				return
			case s := <-sigs:
				g := grace
				if first == nil {
					first = s
					con.notef("%s: stopping job %s (SIGTERM to workers, SIGKILL after %s; press Ctrl-C again to kill now)", s, id, grace)
				} else {
					g = time.Millisecond
					con.notef("%s: killing job %s now", s, id)
				}
				if _, err := c.Stop(ctx, id, g); err != nil && ctx.Err() == nil {
					con.notef("stop %s: %v", id, err)
				}
			}
		}
	}()
	return out
}

// errDaemonLost says that the daemon was gone for daemonLostAfter.
var errDaemonLost = errors.New("lost the daemon")

// followJob prints the job's output and events from attempt first on until
// its final event, which it returns; errDaemonLost when the daemon goes away.
func followJob(ctx context.Context, c *api.Client, id string, first int, con *console, st *stepStatus) (*telemetry.Event, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lost atomic.Bool // the daemon went away; set before ctx is cancelled
	watched := make(chan struct{})
	go func() { // joined below; ends with ctx
		defer close(watched)
		watchDaemon(ctx, c, daemonLostAfter, func() { lost.Store(true); cancel() })
	}()
	var final *telemetry.Event
	err := c.Output(ctx, id, true, func(l *telemetry.LogLine, e *telemetry.Event) error {
		if l != nil && l.Attempt < first || e != nil && e.Attempt < first && e.Kind != telemetry.EventSubmitted {
			return nil // the output of a run before this one (--resume)
		}
		if l != nil {
			con.workerLine(l.Rank, l.Stream == string(plugins.Stderr), l.Line)
			return nil
		}
		if e.Kind == telemetry.EventFinished {
			final = e
			return errFinished
		}
		switch e.Kind {
		case telemetry.EventDecided:
			st.plan(e.Phase, e.PredictedS, e.PredictedUSD)
			con.notef("%s: %s", e.Phase, e.Message)
		case telemetry.EventStopping, telemetry.EventMoved, telemetry.EventRestarting:
			con.notef("%s", e.Message)
		case telemetry.EventStarted:
			if e.Attempt > 1 {
				con.notef("%s", e.Message)
			}
		}
		return nil
	})
	cancel()
	<-watched
	switch {
	case lost.Load():
		return nil, errDaemonLost
	case !errors.Is(err, errFinished):
		return nil, fmt.Errorf("follow output of %s: %w", id, err)
	}
	return final, nil
}

// daemonLostAfter is how long scavctl run waits for a lost daemon to come
// back before it stops following the job; exitDaemonLost is its exit status
// then (EX_TEMPFAIL: the job may well go on).
const (
	daemonLostAfter = 15 * time.Second
	exitDaemonLost  = 75
)

// connection is what watchDaemon needs of a client.
type connection interface{ Connected() bool }

// watchDaemon calls lost once nc has not been connected for after (a
// reconnect within it, as to a scavd restarted on the same address, is
// fine), and returns; or returns when ctx ends.
func watchDaemon(ctx context.Context, nc connection, after time.Duration, lost func()) {
	tick := time.NewTicker(after / 30)
	defer tick.Stop()
	var since time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			switch {
			case nc.Connected():
				since = time.Time{}
			case since.IsZero():
				since = now
			case now.Sub(since) >= after:
				lost()
				return
			}
		}
	}
}

// buildRunRequest turns flags and the command into the daemon's request.
func buildRunRequest(f runFlags, args []string) (api.RunRequest, error) {
	var errs []error
	dir, err := os.Getwd()
	if err != nil {
		errs = append(errs, fmt.Errorf("read working directory: %w", err))
	}
	env, err := workerEnv(f.env)
	if err != nil {
		errs = append(errs, err)
	}
	ckpt := f.checkpoint
	if ckpt != "" {
		if ckpt, err = filepath.Abs(ckpt); err != nil {
			errs = append(errs, fmt.Errorf("--checkpoint-dir %q: %w", f.checkpoint, err))
		}
	}
	if f.grace < 0 {
		errs = append(errs, fmt.Errorf("--grace %s: must not be negative", f.grace))
	}
	minW, maxW, err := parseRange("--workers", f.workers)
	if err != nil {
		errs = append(errs, err)
	}
	minB, maxB, err := parseRange("--batch-size", f.batch)
	if err != nil {
		errs = append(errs, err)
	}
	opt, err := f.optimize(minW, maxW, minB, maxB)
	if err != nil {
		errs = append(errs, err)
	}
	req := api.RunRequest{
		Name: f.name, Command: args, Dir: dir, Env: env,
		Config:        plugins.Config{Workers: minW, GlobalBatch: minB},
		Optimize:      opt,
		Mode:          plugins.LaunchMode(f.mode),
		CheckpointDir: ckpt, Grace: api.Duration(f.grace), CheckpointSignal: f.ckptSignal, StepRegex: f.stepRegex,
		MaxRestarts: &f.restarts,
	}
	if id := os.Getenv("SLURM_JOB_ID"); id != "" {
		req.Allocation = "slurm." + id // inside a Slurm allocation: tie the job to it
	}
	if err := req.Validate(); err != nil {
		errs = append(errs, err)
	}
	return req, errors.Join(errs...)
}

// workerEnv is this process's environment, less the variables Scavenger
// sets for each worker, with the --env pairs on top.
func workerEnv(pairs []string) ([]string, error) {
	env := plugins.InheritEnv(os.Environ())
	var errs []error
	for _, kv := range pairs {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("--env %q: use KEY=VALUE", kv))
			continue
		} else if plugins.IsContractEnv(k) {
			errs = append(errs, fmt.Errorf("--env %s: Scavenger sets %s for each worker; it may not be given", k, k))
			continue
		}
		env = append(env, kv)
	}
	return env, errors.Join(errs...)
}

// parseRange reads N or MIN:MAX.
func parseRange(flag, v string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(v, ":")
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := lo, error(nil)
	if isRange {
		hi, err2 = strconv.Atoi(strings.TrimSpace(b))
	}
	if err1 != nil || err2 != nil || lo < 0 || hi < lo {
		return 0, 0, fmt.Errorf("%s %q: use N or MIN:MAX with 0 <= MIN <= MAX", flag, v)
	}
	return lo, hi, nil
}

// optimize turns the optimizer flags into the request's part, checking that
// they fit together.
func (f runFlags) optimize(minW, maxW, minB, maxB int) (api.Optimize, error) {
	o := api.Optimize{
		Policy: f.policy, Objective: f.objective, Deadline: api.Duration(f.deadline), BudgetUSD: f.budget,
		MinWorkers: minW, MaxWorkers: maxW, MinBatch: minB, MaxBatch: maxB, PriceUSDPerHour: f.price,
	}
	targets := 0
	for _, set := range []bool{f.targetSteps > 0, f.targetSamples > 0, f.targetEpochs > 0} {
		if set {
			targets++
		}
	}
	switch {
	case targets > 1:
		return o, errors.New("give one of --target-steps, --target-samples, --target-epochs")
	case f.targetSteps > 0:
		o.TargetSamples = f.targetSteps * int64(max(minB, 1))
	case f.targetSamples > 0:
		o.TargetSamples = f.targetSamples
	case f.targetEpochs > 0 && f.datasetSize <= 0:
		return o, errors.New("--target-epochs needs --dataset-size")
	case f.targetEpochs > 0:
		o.TargetSamples = int64(f.targetEpochs * float64(f.datasetSize))
	}
	if !o.Active() && (minW != maxW || minB != maxB) {
		return o, fmt.Errorf("ranges of workers or batch need a moving --policy (scavenger, adaptive or full), not %q", f.policy)
	}
	return o, nil
}

func batchText(b int) string {
	if b == 0 {
		return "(script's own)"
	}
	return fmt.Sprint(b)
}
