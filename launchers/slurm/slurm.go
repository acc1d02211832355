// Package slurm is the launcher that runs a job attempt's workers as Slurm
// tasks: as one srun job step inside an existing allocation, or as a batch
// job it submits with sbatch.
//
// # Inside an allocation (Options.JobID, default $SLURM_JOB_ID, or the job's own SLURM_JOB_ID)
//
// Every attempt is one job step, `srun --jobid=<id> --ntasks=K
// --kill-on-bad-exit=1 --label --verbose ... /bin/sh -c <taskScript>
// scav-task <command...>`, so a relaunch waits in no queue. The task
// script (see taskScript) prints the task's pid, maps SLURM_PROCID,
// SLURM_LOCALID, SLURM_NTASKS and SLURM_GTIDS to RANK, LOCAL_RANK,
// WORLD_SIZE and LOCAL_WORLD_SIZE, sets MASTER_ADDR to the step's first
// node (127.0.0.1 on one node) and execs the command from "$@". The other
// variables of plugins.WorkerEnv, and SCAV_PREEMPT_SIGNAL=USR1, reach the
// tasks through srun's environment (--export=ALL); SLURM_RESTART_COUNT is
// left as Slurm sets it.
//
// Output: srun's stdout and stderr carry the tasks' lines, each prefixed
// with its task number by --label, which is the rank. srun's own messages
// (unlabelled) go to the logger; with --verbose they include the step id
// ("launching StepId=12.3") and, for every task that ends, its raw wait
// status ("Received task exit notification ... (status=0x0009)") followed
// by the tasks it concerns ("localhost: task 1: Killed"). The launcher reads
// each rank's exit code and signal from them, in the order the tasks ended,
// so FailedRank is the first task that failed on its own.
//
// Signals go to the step's tasks with `scancel --signal=SIG <job>.<step>`
// (every process of every task). Stop sends SIGTERM the same way and
// SIGKILL when the grace ends. When a rank fails, srun's --kill-on-bad-exit
// terminates the others; the launcher also starts its own escalation with
// Options.Grace, so a cluster with a long KillWait cannot keep them.
//
// # Outside an allocation (no JobID)
//
// Every attempt is one batch job, submitted with `sbatch --parsable
// --ntasks=K --signal=B:USR1@<grace> --requeue --open-mode=append
// --output=<dir>/out --error=<dir>/err` and a job name
// "scav-<job>-a<attempt>". Its script (see batchScript) runs the same srun
// step (without --jobid) and traps USR1, Slurm's pre-emption warning to the
// batch shell, forwarding it to the step's tasks. The launcher follows the
// job with `scontrol show job -o` every Options.PollInterval and tails the
// two output files, which give the same lines as srun's pipes above. When
// Slurm requeues the job (scontrol requeue, a pre-emption with requeue) it
// is PENDING again with a BeginTime hold of about 120 s;
// the launcher releases it with `scontrol update JobId=<id>
// StartTime=now` two seconds after the requeue (not sooner: slurmd
// refuses a credential made in the second its job's old one was revoked,
// and the job would FAIL), so it runs again within about 3 s. The output files are appended to, and each run starts
// with a marker, so the ranks' results are those of the last run. The
// rerun's workers see SLURM_RESTART_COUNT > 0.
//
// Signal and Stop reach a submitted job's tasks like a step's, with
// scancel on "<job>.<step>" once srun reported the step (on "<job>",
// without --batch, before that). Stop cancels a job that is still pending;
// after SIGKILL to its step it lets the batch script end by itself and
// cancels the job only if it still runs two seconds later (cancelling at
// once kills srun before its tasks' exits reach it, and the job then
// stays COMPLETING for seconds). A rank's failure is left to srun's
// --kill-on-bad-exit. The script and output files stay in
// Options.WorkDir after the job ends, for inspection.
//
// # Attempt lifecycle (both modes)
//
//	Start ──► running ──┬─ every rank exits 0 ──────────────────────────────────┐
//	 step: returns when ├─ a rank fails ──► stopping: srun's kill-on-bad-exit;   │
//	 every task started;│                   step mode also TERM, KILL after Grace├─►
//	 batch: when queued ├─ Stop(ctx, grace) ──► stopping: scancel --signal=TERM,  │
//	                    │                   --signal=KILL after grace (batch: a  │
//	                    │                   pending job, or one still running 2 s│
//	                    │                   after the KILL, is scancelled)      ─┤
//	                    └─ batch job requeued ──► PENDING (BeginTime hold)       │
//	                         ──► scontrol update StartTime=now (2 s after the    │
//	                             requeue) ──► running again: a new run          │
//	                                                                             ▼
//	          srun exited (step) / job in a final state (batch): output drained,
//	          Result published; Wait returns it to every caller
//
// Handle.ID is "<job>.<step>" for a step inside an allocation (e.g.
// "12.3") and "<job>" for a submitted job (e.g. "13"); a requeued job keeps
// its id, and Wait returns only when its last run has ended.
//
// # On clusters of several nodes
//
// A node that Slurm marks DOWN or not responding while an attempt runs on
// it is lost: when the attempt fails (srun ends with an error, the job
// ends in NODE_FAIL), the attempt's nodes that Slurm then reports lost are
// named in Result.LostHosts, so that the daemon relaunches the job on the
// others; Capabilities leaves lost nodes out. Slurm requeues a submitted
// job (--requeue) whose node failed: the launcher cancels it instead of
// releasing it, and the attempt ends with the lost nodes in LostHosts (so
// the daemon's relaunch is a new attempt, from the newest checkpoint, at a
// configuration that fits the nodes left). Inside an allocation a node
// failure ends the allocation unless it was made with --no-kill; with it,
// Slurm takes the node out of the allocation and the next step runs on
// the rest.
//
// MASTER_PORT (unless Options.MasterPort is set) is a port free on the
// launcher's node when the attempt starts, which rank 0, on the first node
// of the step, may find taken; set Options.MasterPort there. A submitted
// job's output files are read from Options.WorkDir, which must be shared
// with the batch node. SCAV_SOCKET is the launching daemon's socket: the
// workers on other nodes reach their own node's daemon only where every
// node runs scavd with the same socket path.
package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
)

// Defaults of Options.
const (
	DefaultGrace        = 5 * time.Second
	DefaultPollInterval = 500 * time.Millisecond
	DefaultMaxLineBytes = 64 << 10
	// PreemptSignal is the signal Slurm sends before it ends an allocation
	// (sbatch --signal=B:USR1@grace), and SCAV_PREEMPT_SIGNAL of the workers.
	PreemptSignal = "USR1"
)

// cmdTimeout bounds one Slurm client command.
const cmdTimeout = 30 * time.Second

// Options configure a Slurm Launcher.
type Options struct {
	// Logger is required; the launcher names its logger "slurm".
	Logger *zap.Logger
	// JobID is the allocation attempts run in as job steps (default the
	// environment's SLURM_JOB_ID); empty: every attempt is submitted as a
	// batch job.
	JobID string
	// Partition is the partition batch jobs are submitted to and whose
	// nodes Capabilities reports (default: the cluster's default partition).
	Partition string
	// Grace is how long workers get between the pre-emption signal and the
	// end of their allocation (sbatch --signal=B:USR1@grace), and between
	// SIGTERM and SIGKILL for the peers of a failed rank. Default DefaultGrace.
	Grace time.Duration
	// PollInterval is how often a submitted job's state and output files
	// are read. Default DefaultPollInterval.
	PollInterval time.Duration
	// SbatchArgs are extra sbatch arguments (--account=..., --time=..., --gres=...).
	SbatchArgs []string
	// SrunArgs are extra srun arguments for every step (--exact,
	// --cpus-per-task=..., --gpus-per-task=...).
	SrunArgs []string
	// WorkDir holds the batch scripts and output files of submitted jobs
	// (default <os.TempDir()>/scavenger-slurm). On a cluster of several
	// nodes it must be on a file system the batch node and this node share.
	WorkDir string
	// MasterPort fixes MASTER_PORT; 0 picks a port free on this node.
	MasterPort int
	// Env holds extra KEY=VALUE pairs for the Slurm commands and the
	// workers (for example SLURM_CONF=...), on top of this process's environment.
	Env []string
	// Srun, Sbatch, Scontrol, Scancel and Sinfo are the Slurm commands
	// (default: found on PATH). Jobs are followed with `scontrol show job
	// -o`, which every Slurm version prints the same way, rather than
	// `squeue --json`, whose schema changes with the version.
	Srun, Sbatch, Scontrol, Scancel, Sinfo string
	// MaxLineBytes is the longest output line delivered whole; longer
	// lines are delivered in pieces. Default DefaultMaxLineBytes.
	MaxLineBytes int
}

// Launcher starts attempts through Slurm. It implements plugins.Launcher.
type Launcher struct {
	opts   Options
	logger *zap.Logger
}

var _ plugins.Launcher = (*Launcher)(nil)

// New fills in the defaults of opts and returns the launcher; it fails when
// the Logger is missing or a Slurm command is not found.
func New(opts Options) (*Launcher, error) {
	if opts.Logger == nil {
		return nil, errors.New("new slurm launcher: Options.Logger is required")
	}
	if opts.JobID == "" {
		opts.JobID = os.Getenv("SLURM_JOB_ID")
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = DefaultMaxLineBytes
	}
	if opts.WorkDir == "" {
		opts.WorkDir = filepath.Join(os.TempDir(), "scavenger-slurm")
	}
	// Slurm resolves a relative --output against the job's --chdir, not ours.
	wd, err := filepath.Abs(opts.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("new slurm launcher: work dir %s: %w", opts.WorkDir, err)
	}
	opts.WorkDir = wd
	for _, c := range []struct {
		p    *string
		name string
	}{{&opts.Srun, "srun"}, {&opts.Sbatch, "sbatch"}, {&opts.Scontrol, "scontrol"},
		{&opts.Scancel, "scancel"}, {&opts.Sinfo, "sinfo"}} {
		if *c.p != "" {
			continue
		}
		p, err := exec.LookPath(c.name)
		if err != nil {
			return nil, fmt.Errorf("new slurm launcher: %s not found (install Slurm's client commands or set Options.%s): %w",
				c.name, strings.ToUpper(c.name[:1])+c.name[1:], err)
		}
		*c.p = p
	}
	return &Launcher{opts: opts, logger: opts.Logger.Named("slurm")}, nil
}

// Name returns "slurm".
func (l *Launcher) Name() string { return "slurm" }

// env is the environment of Slurm commands: this process's, without the
// contract variables, plus Options.Env.
func (l *Launcher) env() []string {
	return append(plugins.InheritEnv(os.Environ()), l.opts.Env...)
}

// run runs a Slurm command and returns its stdout; a failure wraps
// ErrCommand and carries the command's stderr.
func (l *Launcher) run(ctx context.Context, path string, args ...string) (string, error) {
	return l.runWith(ctx, l.env(), path, args...)
}

// runWith is run with the environment env.
func (l *Launcher) runWith(ctx context.Context, env []string, path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = "no stderr"
		}
		return stdout.String(), fmt.Errorf("%s %s: %w: %w: %s", filepath.Base(path), strings.Join(args, " "), ErrCommand, err, msg)
	}
	return stdout.String(), nil
}

// job reads one job's state.
func (l *Launcher) job(ctx context.Context, id string) (jobInfo, error) {
	out, err := l.run(ctx, l.opts.Scontrol, "show", "job", "-o", id)
	if err != nil {
		return jobInfo{}, err
	}
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	return parseJob(line)
}

// hostnames expands a compressed host list.
func (l *Launcher) hostnames(ctx context.Context, list string) ([]string, error) {
	if list == "" || list == "(null)" {
		return nil, nil
	}
	out, err := l.run(ctx, l.opts.Scontrol, "show", "hostnames", list)
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// Capabilities reports, inside an allocation, its CPUs as MaxWorkers (one
// CPU per worker at least) and its nodes as Hosts; outside, the CPUs and
// nodes of the partition.
func (l *Launcher) Capabilities(ctx context.Context) (plugins.Capabilities, error) {
	if l.opts.JobID != "" {
		j, err := l.allocation(ctx, l.opts.JobID)
		if err != nil {
			return plugins.Capabilities{}, err
		}
		hosts, err := l.hostnames(ctx, j.NodeList)
		if err != nil {
			return plugins.Capabilities{}, fmt.Errorf("capabilities of job %s: %w", j.ID, err)
		}
		return plugins.Capabilities{MaxWorkers: j.NumCPUs, Hosts: hosts}, nil
	}
	nodes, err := l.partitionNodes(ctx)
	if err != nil {
		return plugins.Capabilities{}, err
	}
	c := plugins.Capabilities{}
	for _, n := range nodes {
		c.MaxWorkers += n.cpus
		c.Hosts = append(c.Hosts, n.name)
	}
	return c, nil
}

// allocation reads job id's record and checks that it is running.
func (l *Launcher) allocation(ctx context.Context, id string) (jobInfo, error) {
	j, err := l.job(ctx, id)
	if err != nil {
		return j, fmt.Errorf("allocation %s: %w: %w", id, ErrNoJob, err)
	}
	if j.State != "RUNNING" {
		return j, fmt.Errorf("allocation %s: %w: it is %s (%s)", id, ErrNoJob, j.State, j.Reason)
	}
	return j, nil
}

// allocationOf is the allocation an attempt runs in as a job step:
// Options.JobID, else the SLURM_JOB_ID of the job's own environment (a job
// that `scavctl run` started inside an allocation, with a node scavd whose
// launcher is slurm); empty: submit it.
func (l *Launcher) allocationOf(spec plugins.AttemptSpec) string {
	if l.opts.JobID != "" {
		return l.opts.JobID
	}
	id := ""
	for _, kv := range spec.Env {
		if v, ok := strings.CutPrefix(kv, "SLURM_JOB_ID="); ok {
			id = v
		}
	}
	return id
}

type nodeCPUs struct {
	name string
	cpus int
}

// partitionNodes lists the nodes of Options.Partition (or of the default
// partition) with their CPUs, from sinfo.
func (l *Launcher) partitionNodes(ctx context.Context) ([]nodeCPUs, error) {
	out, err := l.run(ctx, l.opts.Sinfo, "-h", "-N", "-o", "%N %c %P %T")
	if err != nil {
		return nil, fmt.Errorf("capabilities: %w", err)
	}
	nodes, err := parseSinfoNodes(out, l.opts.Partition)
	if err != nil {
		return nil, fmt.Errorf("capabilities: %w", err)
	}
	return nodes, nil
}

// parseSinfoNodes reads `sinfo -h -N -o "%N %c %P %T"` lines for
// partition (the default partition, marked "*", when empty), leaving out
// the nodes that Slurm has lost (see lostState).
func parseSinfoNodes(out, partition string) ([]nodeCPUs, error) {
	var nodes []nodeCPUs
	seen := map[string]bool{}
	found := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		p := f[2]
		isDefault := strings.HasSuffix(p, "*")
		p = strings.TrimSuffix(p, "*")
		if (partition == "" && !isDefault) || (partition != "" && p != partition) {
			continue
		}
		found = true
		if lostState(f[3]) {
			continue
		}
		cpus, err := strconv.Atoi(f[1])
		if err != nil {
			return nil, fmt.Errorf("sinfo line %q: %w", line, err)
		}
		if !seen[f[0]] {
			seen[f[0]] = true
			nodes = append(nodes, nodeCPUs{f[0], cpus})
		}
	}
	if !found {
		if partition == "" {
			return nil, errors.New("sinfo shows no default partition; set the partition")
		}
		return nil, fmt.Errorf("sinfo shows no partition %q", partition)
	}
	return nodes, nil
}

// lostState reports whether a node state as sinfo prints it (%T) is that
// of a node Slurm has lost: not responding ("idle*", "down*": a trailing
// "*") or down.
func lostState(state string) bool {
	return strings.HasSuffix(state, "*") || strings.HasPrefix(state, "down")
}

// lostNodes returns the nodes of the compressed host list that Slurm
// reports lost now.
func (l *Launcher) lostNodes(ctx context.Context, list string) ([]string, error) {
	hosts, err := l.hostnames(ctx, list)
	if err != nil || len(hosts) == 0 {
		return nil, err
	}
	out, err := l.run(ctx, l.opts.Sinfo, "-h", "-N", "-o", "%N %T")
	if err != nil {
		return nil, err
	}
	states := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			states[f[0]] = f[1]
		}
	}
	var lost []string
	for _, h := range hosts {
		if lostState(states[h]) {
			lost = append(lost, h)
		}
	}
	return lost, nil
}

// Start validates spec and starts it: as a step of Options.JobID, returning
// once every task has started, or as a submitted batch job, returning once
// sbatch has queued it. More workers than the allocation's CPUs, or more
// nodes than it has, are plugins.ErrUnsupported; so are more workers than
// the partition's CPUs for a submitted job. Config.MachineType is ignored.
// The processes are not tied to ctx, which only bounds the start.
func (l *Launcher) Start(ctx context.Context, spec plugins.AttemptSpec) (plugins.Handle, error) {
	fail := func(err error) (plugins.Handle, error) {
		return nil, fmt.Errorf("start job %s attempt %d: %w", spec.JobID, spec.Attempt, err)
	}
	if err := spec.Validate(); err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	tasks := spec.Config.Workers
	if plugins.ResolveMode(spec.Mode, spec.Command) == plugins.ModeSelf {
		tasks = 1
	}
	if alloc := l.allocationOf(spec); alloc != "" {
		j, err := l.allocation(ctx, alloc)
		if err != nil {
			return fail(err)
		}
		if tasks > j.NumCPUs {
			return fail(fmt.Errorf("%d workers above the %d CPUs of allocation %s: %w", tasks, j.NumCPUs, j.ID, plugins.ErrUnsupported))
		}
		if spec.Config.Nodes > j.NumNodes {
			return fail(fmt.Errorf("%d nodes above the %d of allocation %s: %w", spec.Config.Nodes, j.NumNodes, j.ID, plugins.ErrUnsupported))
		}
		a := newAttempt(l, spec, tasks, false)
		a.nodeList = j.NodeList
		if err := a.startStep(ctx, alloc); err != nil {
			return fail(err)
		}
		return a, nil
	}
	nodes, err := l.partitionNodes(ctx)
	if err != nil {
		return fail(err)
	}
	cpus := 0
	for _, n := range nodes {
		cpus += n.cpus
	}
	if tasks > cpus {
		return fail(fmt.Errorf("%d workers above the %d CPUs of the partition: %w", tasks, cpus, plugins.ErrUnsupported))
	}
	if spec.Config.Nodes > len(nodes) {
		return fail(fmt.Errorf("%d nodes above the %d of the partition: %w", spec.Config.Nodes, len(nodes), plugins.ErrUnsupported))
	}
	a := newAttempt(l, spec, tasks, true)
	if err := a.submit(ctx); err != nil {
		return fail(err)
	}
	return a, nil
}

// workerEnv is the environment of an attempt's srun or sbatch: the
// launcher's, spec.Env and the contract variables that are the same for
// every task (the task script sets the per-rank ones), the pre-emption
// signal and unbuffered python output (so lines arrive as written).
func (l *Launcher) workerEnv(spec plugins.AttemptSpec, port int) []string {
	env := l.env()
	if !hasKey(spec.Env, "PYTHONUNBUFFERED") {
		env = append(env, "PYTHONUNBUFFERED=1")
	}
	for _, kv := range plugins.WorkerEnv(spec, 0, 0, 0, "", port) {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case plugins.EnvRank, plugins.EnvLocalRank, plugins.EnvLocalWorldSize, plugins.EnvMasterAddr:
			continue // set by the task script
		}
		env = append(env, kv)
	}
	return append(env, plugins.EnvPreemptSignal+"="+PreemptSignal)
}

func hasKey(env []string, key string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return true
		}
	}
	return false
}

// masterPort is Options.MasterPort or a port free on this node a moment ago.
func (l *Launcher) masterPort() (int, error) {
	if l.opts.MasterPort != 0 {
		return l.opts.MasterPort, nil
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, fmt.Errorf("pick master port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// jobName is the Slurm job (or step) name of an attempt.
func jobName(spec plugins.AttemptSpec) string {
	id := strings.Map(func(r rune) rune {
		if r == ' ' || r == '\n' || r == '\t' || r == '"' || r == '\'' || r == '/' {
			return '_'
		}
		return r
	}, spec.JobID)
	if len(id) > 100 {
		id = id[:100]
	}
	return "scav-" + id + "-a" + strconv.Itoa(spec.Attempt)
}
