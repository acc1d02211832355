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
	"syscall"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/control"
	"github.com/scavenger-ml/scavenger/optimizer/price"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/plugins"
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
	detach     bool
	restarts   int

	policy        string
	objective     string
	deadline      time.Duration
	budget        float64
	targetSteps   int64
	targetSamples int64
	targetEpochs  float64
	datasetSize   int64
	baseBatch     int
	price         float64
	machineType   string

	modelKey string

	file     string
	launcher string
	types    []string
	spot     bool
	maxPrice float64

	faults api.Faults
}

func newRunCmd(a *app) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run a training command under Scavenger and stream its output",
		Long: `run launches CMD as a data-parallel job: one process per worker with the
torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) and Scavenger's (SCAV_JOB_ID, SCAV_SOCKET,
SCAV_GLOBAL_BATCH and SCAV_LOCAL_BATCH with a --batch-size (without one they
are unset, never 0, and the script uses its own), SCAV_CHECKPOINT_DIR, ...). The python
package "scavenger" is on the workers' PYTHONPATH; scripts that use it report
every step, and scripts that do not run unchanged.

Arguments may use {workers}, {batch_size} and {local_batch_size}; they are
replaced by the job's configuration. Commands that are launchers themselves
(torchrun, python -m torch.distributed.run) are started once, not per worker.

Output lines are prefixed with the worker's rank. On a terminal a status line
shows the step, samples/s, workers and global batch. Ctrl-C or SIGTERM stops
the job: SIGTERM to the workers, SIGKILL after --grace.

scavctl exits with the job's exit code, so that "scavctl run ... && next" goes
on only from a job that finished:
  0        every worker exited 0
  N        a worker failed with N (128+n: killed by signal n)
  143      the job was stopped before it finished (scavctl stop)
  137      it had to be killed (past its grace)
  130      you stopped it with Ctrl-C (143 with SIGTERM to scavctl)
  75       scavctl let go of the job, which may go on: its scavd was gone
           for 15s (a scavd that restarts hands its jobs to the next one, and
           run follows them there when it is back within that time; else
           follow the job with scavctl attach JOB)
  1        scavctl itself failed (bad flags, no daemon, ...)`,
		Example: `  scavctl run --workers 2 --batch-size 64 -- /usr/bin/python3 examples/cnn.py --steps 50
  scavctl run --workers 2 -- /usr/bin/python3 examples/plain_ddp.py
  scavctl run --workers 4 --mode self -- torchrun --nproc_per_node={workers} train.py --bs={local_batch_size}
  scavctl run -f examples/job.yaml --workers 2`,
		Args: cobra.ArbitraryArgs, // checked once a job file had its say
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && cmd.ArgsLenAtDash() != 0 {
				return fmt.Errorf("unexpected argument %q before --: put the training command after --", args[0])
			}
			if f.file != "" {
				command, err := applyJobFile(cmd.Flags(), f.file)
				if err != nil {
					return err
				}
				if len(args) == 0 {
					args = command
				}
			}
			switch {
			case f.resume != "" && len(args) > 0:
				return errors.New("--resume continues a job's own command: give no command")
			case f.resume == "" && len(args) == 0:
				return errors.New("no command: give it after --, e.g. scavctl run -- python train.py (or as command: in a job file, -f)")
			}
			a.launcher = f.launcher
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
	fl.StringVar(&f.policy, "policy", "fixed", "how the job is moved: fixed (never), scavenger (the paper's partial search), adaptive (keeps re-optimising), full, none (no search: what earlier runs of the same command stored, see scavctl models)")
	fl.StringVar(&f.modelKey, "model-key", "", "the name of the job's entries in the model store (default: a hash of the command and its arguments); jobs with the same key share what they measured")
	fl.StringVar(&f.objective, "objective", "time", "what the policy optimises: time, cost or knee")
	fl.DurationVar(&f.deadline, "deadline", 0, "with --objective cost: finish within this time")
	fl.Float64Var(&f.budget, "budget", 0, "with --objective time: spend at most this many USD")
	fl.Int64Var(&f.targetSteps, "target-steps", 0, "the job's work: this many steps at the starting batch (the script gets SCAV_TARGET_SAMPLES)")
	fl.Int64Var(&f.targetSamples, "target-samples", 0, "the job's work in samples, counted at --base-batch (the script gets SCAV_TARGET_SAMPLES)")
	fl.Float64Var(&f.targetEpochs, "target-epochs", 0, "the job's work in epochs of --dataset-size samples")
	fl.Int64Var(&f.datasetSize, "dataset-size", 0, "samples in one epoch (for --target-epochs)")
	fl.IntVar(&f.baseBatch, "base-batch", 0, "the global batch the work (--target-*) is counted at: a step of a larger batch does less than its samples, by the gradient noise scale, and the script counts it so (scavenger.scaling.work, SCAV_BASE_BATCH; default: the starting batch; give jobs that start at different batches the same base to make them do the same work)")
	fl.Float64Var(&f.price, "price", 0, "$/hour of this machine, for costs and cost objectives (default: the catalog's for --machine-type; none: no costs shown)")
	fl.StringVar(&f.machineType, "machine-type", "", "this machine's type in the price catalog (scavctl prices), which gives its price")
	fl.StringVar(&f.stepRegex, "step-regex", "", "for scripts without the python client: a regex that finds progress in their output, with named groups step, rate (it/s) or total (default: tqdm bars and \"step N\" lines)")
	fl.StringVarP(&f.file, "file", "f", "", "a YAML job file: run's flags as keys (workers: 2, batch-size: 32:128, env: {K: V}, ...) and command: [python3, train.py]; flags given here win")
	fl.BoolVarP(&f.detach, "detach", "d", false, "submit the job to the node's scavd, print its id and return (follow it with scavctl attach)")
	fl.StringVar(&f.resume, "resume", "", "continue the stopped job JOB from its last checkpoint (no command needed)")
	fl.IntVar(&f.restarts, "max-restarts", api.DefaultMaxRestarts, "restart a job whose worker crashed (not stopped, not moved) at least this many times, from its last complete checkpoint, with back-off; 0: never (a command that cannot run, or that crashes before its first step twice alike, is not restarted)")
	fl.DurationVar((*time.Duration)(&f.faults.RestartWindow), "restart-window", api.DefaultRestartWindow, "past --max-restarts, go on restarting while the restarts' back-off in all is shorter than this, so that a passing fault (a full disk, a network down) is outlasted")
	fl.DurationVar((*time.Duration)(&f.faults.StallTimeout), "stall-timeout", 0, "a job whose ranks report no step for this long is stalled (0: 10 times its slowest step, at least 5m)")
	fl.StringVar(&f.faults.OnStall, "on-stall", api.StallReport, "what a stall does: report (marks the job stalled in status, top and the metrics) or restart (also restarts it from its last checkpoint)")
	fl.StringVar(&f.faults.OnNaN, "on-nan", api.NaNWarn, "what a loss that turns NaN or infinite does: warn (an event in the status line, report and top) or stop (stops the job)")
	fl.DurationVar(&f.statusTick, "status-every", 10*time.Second, "interval of the plain status lines when stderr is not a terminal (0: none)")
	fl.StringVar(&f.launcher, "launcher", "", "the launcher the job needs (local, ssh, slurm, cloudvm): a scavd scavctl starts opens it; a running one must have it")
	fl.StringSliceVar(&f.types, "types", nil, "launcher cloudvm: the machine types the job may run on, the first to start on (default: the launcher's)")
	fl.BoolVar(&f.spot, "spot", false, "launcher cloudvm: buy spot machines when offered (pre-emptible; on demand is the fallback)")
	fl.Float64Var(&f.maxPrice, "max-price", 0, "launcher cloudvm: the most one machine may cost, $/hour (0: no cap)")
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

	c, release, err := a.connect(ctx, !f.detach)
	if err != nil {
		if f.detach {
			return fmt.Errorf("%w\n  -d hands the job to a scavd that outlives this command: start one (systemctl start scavd, or scavd --state-dir %s &, see the README), or run without -d", err, a.stateDir)
		}
		return err
	}
	defer release()
	job, first, err := a.submit(ctx, c, f, req)
	if err != nil {
		return err
	}
	if f.detach {
		fmt.Fprintln(a.stdout, job.ID)
		fmt.Fprintf(a.stderr, "scavctl: job %s submitted; follow it with scavctl attach %[1]s, stop it with scavctl stop %[1]s\n", job.ID)
		return nil
	}
	return a.watchJob(ctx, c, job, first, watchOptions{tick: f.statusTick, grace: f.grace, stop: true}, sigs)
}

// submit submits req, or with --resume resumes that job; first is the first
// attempt whose output is this command's.
func (a *app) submit(ctx context.Context, c *api.Client, f runFlags, req api.RunRequest) (job api.Job, first int, err error) {
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
	if job, err = a.resolve(ctx, c, f.resume); err != nil {
		return job, 0, fmt.Errorf("resume job: %w", err)
	}
	if job, err = c.Resume(ctx, job.ID, env); err != nil {
		return job, 0, fmt.Errorf("resume job: %w", err)
	}
	return job, job.Attempt + 1, nil
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
	if f.grace < 0 || f.grace > api.MaxGrace {
		errs = append(errs, fmt.Errorf("--grace %s: use 0 to %s (a stop, and a daemon's shutdown, wait for it)", f.grace, api.MaxGrace))
	}
	if err := f.faults.Validate(); err != nil {
		errs = append(errs, err)
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
	cfg := plugins.Config{Workers: minW, GlobalBatch: minB}
	if len(f.types) > 0 {
		cfg.MachineType = f.types[0]
	}
	if f.spot {
		cfg.Market = plugins.MarketSpot
	}
	req := api.RunRequest{
		Name: f.name, Command: args, Dir: dir, Env: env,
		Config:        cfg,
		Optimize:      opt,
		Mode:          plugins.LaunchMode(f.mode),
		CheckpointDir: ckpt, Grace: api.Duration(f.grace), CheckpointSignal: f.ckptSignal, StepRegex: f.stepRegex,
		MaxRestarts: &f.restarts, Faults: f.faults,
	}
	if id := os.Getenv("SLURM_JOB_ID"); id != "" {
		req.Allocation = "slurm." + id // inside a Slurm allocation: tie the job to it
	}
	if len(errs) > 0 { // the request's own checks would repeat these in its terms
		return req, errors.Join(errs...)
	}
	return req, control.Check(req)
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
	switch {
	case err1 != nil || err2 != nil:
		return 0, 0, fmt.Errorf("%s %q: use a number N, or a range MIN:MAX (e.g. %s 1:4)", flag, v, flag)
	case lo < 1 && flag == "--workers":
		return 0, 0, fmt.Errorf("%s %q: a job needs at least 1 worker", flag, v)
	case lo < 0:
		return 0, 0, fmt.Errorf("%s %q: must not be negative", flag, v)
	case hi < lo:
		return 0, 0, fmt.Errorf("%s %q: the range's MIN %d is above its MAX %d; did you mean %s %d:%d?", flag, v, lo, hi, flag, hi, lo)
	}
	return lo, hi, nil
}

// optimize turns the optimizer flags into the request's part, checking that
// they fit together.
func (f runFlags) optimize(minW, maxW, minB, maxB int) (api.Optimize, error) {
	o := api.Optimize{
		Policy: f.policy, Objective: f.objective, Deadline: api.Duration(f.deadline), BudgetUSD: f.budget,
		MinWorkers: minW, MaxWorkers: maxW, MinBatch: minB, MaxBatch: maxB, PriceUSDPerHour: f.price,
		MachineType: f.machineType, Types: f.types, Spot: f.spot, MaxPriceUSD: f.maxPrice, ModelKey: f.modelKey,
	}
	if f.machineType != "" && f.price == 0 {
		cat, err := price.Default()
		if err == nil {
			var m price.MachineType
			if m, err = cat.Lookup(f.machineType); err == nil {
				o.PriceUSDPerHour, err = m.Hourly(false)
			}
		}
		if err != nil {
			return o, fmt.Errorf("--machine-type %s: %w (scavctl prices lists the catalog; or give --price)", f.machineType, err)
		}
	}
	if f.maxPrice < 0 {
		return o, errors.New("--max-price must not be negative")
	}
	var neg []error
	for _, v := range []struct {
		flag string
		val  float64
	}{{"--target-steps", float64(f.targetSteps)}, {"--target-samples", float64(f.targetSamples)}, {"--target-epochs", f.targetEpochs},
		{"--dataset-size", float64(f.datasetSize)}, {"--base-batch", float64(f.baseBatch)}, {"--price", f.price}, {"--budget", f.budget}, {"--deadline", f.deadline.Seconds()}} {
		if v.val < 0 {
			neg = append(neg, fmt.Errorf("%s: must not be negative", v.flag))
		}
	}
	if len(neg) > 0 {
		return o, errors.Join(neg...)
	}
	targets := 0
	for _, set := range []bool{f.targetSteps > 0, f.targetSamples > 0, f.targetEpochs > 0} {
		if set {
			targets++
		}
	}
	o.BaseBatch = f.baseBatch
	switch {
	case targets > 1:
		return o, errors.New("give one of --target-steps, --target-samples, --target-epochs")
	case targets == 0 && f.baseBatch > 0:
		return o, errors.New("--base-batch counts the work of a target: give --target-steps, --target-samples or --target-epochs with it")
	case f.targetSteps > 0:
		o.TargetSamples = f.targetSteps * int64(max(minB, 1))
	case f.targetSamples > 0:
		o.TargetSamples = f.targetSamples
	case f.targetEpochs > 0 && f.datasetSize <= 0:
		return o, errors.New("--target-epochs needs --dataset-size")
	case f.targetEpochs > 0:
		o.TargetSamples = int64(f.targetEpochs * float64(f.datasetSize))
	}
	return o, nil // the request's checks (api.RunRequest.Validate) refuse ranges without a policy
}

func batchText(b int) string {
	if b == 0 {
		return "(script's own)"
	}
	return fmt.Sprint(b)
}
