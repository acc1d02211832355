package slurm

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/lineio"
	"github.com/scavenger-ml/scavenger/plugins"
)

// startTimeoutOnCancel is how long a cancelled Start waits for the srun it
// started to end after stopping it.
const startTimeoutOnCancel = 10 * time.Second

// srunProcess is the srun of a step-mode attempt.
type srunProcess struct {
	cmd     *exec.Cmd
	waitErr error
}

// signal sends sig to srun (not to the tasks: srun, SIGTERMed while it
// waits for its step to be created, gives up).
func (p *srunProcess) signal(sig syscall.Signal) {
	if p != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// startStep starts the attempt's srun step in allocation alloc and returns
// once every task has started, or with an error (carrying srun's) when the
// step ended first or ctx ended.
func (a *attempt) startStep(ctx context.Context, alloc string) error {
	a.jobID = alloc
	port, err := a.l.masterPort()
	if err != nil {
		return err
	}
	mode := plugins.ResolveMode(a.spec.Mode, a.spec.Command)
	argv := plugins.ExpandCommand(a.spec.Command, a.spec.Config)
	args := srunArgs(a.jobID, a.n, a.spec.Config.Nodes, jobName(a.spec), a.spec.Dir, a.l.opts.SrunArgs, mode, argv)
	cmd := exec.Command(a.l.opts.Srun, args...)
	cmd.Env = a.l.workerEnv(a.spec, port)
	// srun in its own group: a terminal's SIGINT to the daemon does not
	// reach it; the launcher alone signals the step.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("srun in allocation %s: %w", a.jobID, err)
	}
	a.srun = &srunProcess{cmd: cmd}
	var readers sync.WaitGroup
	readers.Go(func() { a.readPipe(plugins.Stdout, stdout) })
	readers.Go(func() { a.readPipe(plugins.Stderr, stderr) })
	go func() {
		readers.Wait()
		a.srun.waitErr = cmd.Wait()
		if a.srun.waitErr != nil {
			a.logger.Debug("srun ended", zap.Error(a.srun.waitErr))
		}
		close(a.events)
	}()
	go a.supervise()
	a.logger.Info("srun started", zap.Strings("command", argv), zap.Int("tasks", a.n), zap.Int("master_port", port))

	select {
	case <-a.ready:
		a.logger.Info("step started", zap.String("id", a.ID()))
		return nil
	case <-a.Done():
		select {
		case <-a.ready: // it started and ended at once
			return nil
		default:
		}
		return fmt.Errorf("srun in allocation %s: %w: %v: %s", a.jobID, ErrStepStart, a.srun.waitErr, a.slurmSays())
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), startTimeoutOnCancel)
		defer cancel()
		if err := a.Stop(sctx, 0); err != nil {
			a.logger.Warn("stop a cancelled start", zap.Error(err))
		}
		return fmt.Errorf("srun in allocation %s: %w", a.jobID, ctx.Err())
	}
}

// readPipe hands each line of one of srun's streams to its parser, cutting
// lines longer than Options.MaxLineBytes.
func (a *attempt) readPipe(stream plugins.Stream, r io.Reader) {
	p := a.parser[0]
	if stream == plugins.Stderr {
		p = a.parser[1]
	}
	out := func(line string, complete bool) { p.piece(stream, line, complete) }
	if err := lineio.Read(r, a.l.opts.MaxLineBytes, out); err != nil {
		a.logger.Warn("read srun output", zap.String("stream", string(stream)), zap.Error(err))
	}
}
