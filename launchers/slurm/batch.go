package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
)

// batchCancelDelay is how long after SIGKILL to its tasks a batch job
// still running is cancelled.
const batchCancelDelay = 2 * time.Second

// requeueSettleSeconds is how many whole seconds after a requeue was
// seen the launcher releases the job (see watch).
const requeueSettleSeconds = 2

// submit writes the attempt's batch script and submits it with sbatch,
// returning once Slurm has queued the job.
func (a *attempt) submit(ctx context.Context) error {
	if err := os.MkdirAll(a.l.opts.WorkDir, 0o755); err != nil {
		return fmt.Errorf("batch work dir: %w", err)
	}
	dir, err := os.MkdirTemp(a.l.opts.WorkDir, strings.TrimPrefix(jobName(a.spec), "scav-")+"-")
	if err != nil {
		return fmt.Errorf("batch work dir: %w", err)
	}
	a.dir = dir
	port, err := a.l.masterPort()
	if err != nil {
		return err
	}
	mode := plugins.ResolveMode(a.spec.Mode, a.spec.Command)
	argv := plugins.ExpandCommand(a.spec.Command, a.spec.Config)
	srun := srunArgs("", a.n, a.spec.Config.Nodes, jobName(a.spec), a.spec.Dir, a.l.opts.SrunArgs, mode, argv)
	script := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(script, []byte(batchScript(a.l.opts.Srun, srun, a.spec.JobID, a.spec.Attempt)), 0o755); err != nil {
		return fmt.Errorf("write batch script: %w", err)
	}
	for _, f := range []string{"out", "err"} { // so that the tail can open them at once
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			return fmt.Errorf("create output file: %w", err)
		}
	}
	args := sbatchArgs(a.spec, a.n, dir, a.l.opts.Partition, a.l.opts.Grace, a.l.opts.SbatchArgs)
	args = append(args, script)
	out, err := a.l.runWith(ctx, a.l.workerEnv(a.spec, port), a.l.opts.Sbatch, args...)
	if err != nil {
		// sbatch may have queued the job before it was cut short (a slow
		// slurmctld, the timeout): its name is this attempt's alone.
		cctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
		defer cancel()
		if _, cerr := a.l.run(cctx, a.l.opts.Scancel, "--name="+jobName(a.spec)); cerr != nil {
			a.logger.Debug("cancel what a failed sbatch may have queued", zap.Error(cerr))
		}
		return fmt.Errorf("submit: %w", err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";") // --parsable: "<id>[;<cluster>]"
	if _, err := strconv.Atoi(id); err != nil {
		return fmt.Errorf("submit: sbatch printed %q, not a job id", out)
	}
	a.mu.Lock()
	a.jobID = id
	a.mu.Unlock()
	a.logger.Info("job submitted", zap.String("id", id), zap.Strings("command", argv), zap.Int("tasks", a.n),
		zap.String("dir", dir), zap.Int("master_port", port))
	go a.watch()
	go a.supervise()
	return nil
}

// sbatchArgs are the sbatch options of a submitted attempt (before the script).
func sbatchArgs(spec plugins.AttemptSpec, tasks int, dir, partition string, grace time.Duration, extra []string) []string {
	args := []string{"--parsable", "--job-name=" + jobName(spec), "--ntasks=" + strconv.Itoa(tasks)}
	if spec.Config.Nodes > 0 {
		args = append(args, "--nodes="+strconv.Itoa(spec.Config.Nodes))
	}
	if partition != "" {
		args = append(args, "--partition="+partition)
	}
	args = append(args,
		"--signal=B:"+PreemptSignal+"@"+strconv.Itoa(seconds(grace)),
		"--requeue", "--open-mode=append",
		"--output="+filepath.Join(dir, "out"), "--error="+filepath.Join(dir, "err"),
		"--export=ALL")
	if spec.Dir != "" {
		args = append(args, "--chdir="+spec.Dir)
	}
	return append(args, extra...)
}

// watch follows a submitted job: it tails its output files and polls its
// state, releases a requeued job from its BeginTime hold, and closes the
// events once the job has reached a final state and its files are read.
func (a *attempt) watch() {
	defer close(a.events)
	tails := []*tail{
		{path: filepath.Join(a.dir, "out"), stream: plugins.Stdout, p: a.parser[0], max: a.l.opts.MaxLineBytes},
		{path: filepath.Join(a.dir, "err"), stream: plugins.Stderr, p: a.parser[1], max: a.l.opts.MaxLineBytes},
	}
	defer func() {
		for _, t := range tails {
			t.close()
		}
	}()
	readAll := func(final bool) {
		for _, t := range tails {
			if err := t.read(final); err != nil {
				a.logger.Warn("read job output", zap.String("file", t.path), zap.Error(err))
			}
		}
	}
	id := a.ID()
	released := 0            // the restart count last released
	seen := 0                // the restart count last seen
	var requeuedAt time.Time // when the restart count last changed
	var failingSince, warned time.Time
	tick := time.NewTicker(a.l.opts.PollInterval)
	defer tick.Stop()
	for {
		readAll(false)
		j, err := a.l.job(context.Background(), id)
		switch {
		case err != nil:
			if failingSince.IsZero() {
				failingSince, warned = time.Now(), time.Now()
			}
			// Only Slurm saying so makes the job lost: a slurmctld that does not
			// answer (restarting, failing over) leaves it running.
			if strings.Contains(err.Error(), "Invalid job id") {
				readAll(true)
				a.mu.Lock()
				a.lost = fmt.Errorf("%w: %w", ErrJobLost, err)
				a.mu.Unlock()
				return
			}
			if time.Since(warned) > time.Minute {
				a.logger.Warn("cannot read the job's state; still following it", zap.Error(err), zap.Duration("for", time.Since(failingSince)))
				warned = time.Now()
			} else {
				a.logger.Debug("read job state", zap.Error(err))
			}
		default:
			failingSince = time.Time{}
			a.mu.Lock()
			prev := a.lastJob.State
			a.lastJob = j
			if j.State == "RUNNING" && j.NodeList != "" && j.NodeList != "(null)" {
				a.nodeList = j.NodeList
			}
			a.mu.Unlock()
			if j.State != prev {
				a.logger.Debug("job state", zap.String("state", j.State), zap.String("reason", j.Reason), zap.Int("restarts", j.Restarts))
			}
			if j.Restarts != seen { // a requeue (or the first look, after a Recover)
				seen, requeuedAt = j.Restarts, time.Now()
				if j.State != "RUNNING" {
					a.afterNodeFailure(j)
				}
			}
			a.mu.Lock()
			nodesLost := len(a.nodesLost) > 0
			a.mu.Unlock()
			// Release a requeued job from its BeginTime hold, but not in
			// the second of the requeue or the next: slurmd refuses a job
			// credential created in the second its job's credential was
			// revoked ("Job credential revoked", the job FAILS), which
			// Slurm's 120 s hold otherwise avoids.
			if j.State == "PENDING" && !nodesLost && j.Restarts > released && j.Reason == "BeginTime" &&
				time.Now().Unix() >= requeuedAt.Unix()+requeueSettleSeconds {
				released = j.Restarts
				if _, err := a.l.run(context.Background(), a.l.opts.Scontrol, "update", "JobId="+id, "StartTime=now"); err != nil {
					a.logger.Warn("release requeued job", zap.Error(err))
				} else {
					a.logger.Info("requeued job released from its BeginTime hold", zap.Int("restarts", j.Restarts))
				}
			}
			if j.final() {
				readAll(true)
				return
			}
			a.mu.Lock()
			cancel := !a.cancelAt.IsZero() && time.Now().After(a.cancelAt)
			if nodesLost && j.State == "PENDING" && time.Since(requeuedAt) > nodeLostRecancel {
				cancel, requeuedAt = true, time.Now() // the cancel did not take: again
			}
			if cancel {
				a.cancelAt = time.Time{}
			}
			a.mu.Unlock()
			if cancel {
				a.logger.Warn("job still running after SIGKILL to its steps; cancelling it")
				a.cancelJob(context.Background())
			}
		}
		<-tick.C
	}
}

// nodeLostRecancel is how long after its cancellation a job requeued by a
// node failure that is still pending is cancelled again.
const nodeLostRecancel = 5 * time.Second

// afterNodeFailure handles a requeue of the job: when nodes of its last run
// are lost (a node failure requeued it), it cancels the job rather than
// letting it run again, so that the attempt ends with those nodes in
// Result.LostHosts and the daemon relaunches the job on the others as a
// new attempt, from its newest checkpoint, at a configuration that fits
// what is left (Slurm would rerun it within this attempt, mixing the two
// runs' step records, and keep it pending where the rest is too small).
func (a *attempt) afterNodeFailure(j jobInfo) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	lost := a.lostHosts(ctx)
	if len(lost) == 0 {
		return // a requeue for another reason: released as usual
	}
	a.mu.Lock()
	a.nodesLost = lost
	a.mu.Unlock()
	a.logger.Warn("job requeued after a node failure: cancelling it, for the daemon to relaunch it on the other nodes",
		zap.Strings("lost", lost), zap.Int("restarts", j.Restarts), zap.String("state", j.State))
	a.cancelJob(ctx)
}

// cancelJob cancels the whole job (batch shell and steps).
func (a *attempt) cancelJob(ctx context.Context) {
	if _, err := a.l.run(ctx, a.l.opts.Scancel, a.ID()); err != nil {
		a.logger.Debug("scancel", zap.Error(err))
	}
}

// tail reads the lines appended to one output file.
type tail struct {
	path   string
	stream plugins.Stream
	p      *lineParser
	max    int
	f      *os.File
	buf    []byte
}

// read hands every complete new line to the parser; final also hands the
// last, unterminated one.
func (t *tail) read(final bool) error {
	if t.f == nil {
		f, err := os.Open(t.path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		t.f = f
	}
	chunk := make([]byte, 64<<10)
	for {
		n, err := t.f.Read(chunk)
		t.buf = append(t.buf, chunk[:n]...)
		for {
			i := bytes.IndexByte(t.buf, '\n')
			if i < 0 {
				if len(t.buf) >= t.max {
					t.p.piece(t.stream, string(t.buf[:t.max]), false)
					t.buf = t.buf[t.max:]
					continue
				}
				break
			}
			t.p.piece(t.stream, strings.TrimSuffix(string(t.buf[:i]), "\r"), true)
			t.buf = t.buf[i+1:]
		}
		if errors.Is(err, io.EOF) || n == 0 {
			break
		}
		if err != nil {
			return err
		}
	}
	if final && len(t.buf) > 0 {
		t.p.piece(t.stream, string(t.buf), true)
		t.buf = nil
	}
	return nil
}

func (t *tail) close() {
	if t.f != nil {
		_ = t.f.Close()
	}
}
