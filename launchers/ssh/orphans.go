package ssh

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
)

// After a daemon restart, the attempt the previous daemon ran over SSH may
// still be running on its hosts: a remote command without a terminal
// outlives its session. The registry asks the launcher to stop it before
// the job goes on (or is marked lost), so that no second copy trains.

// StopOrphaned kills, on every host of the inventory, the process groups
// of the workers of the attempt spec names: the processes whose
// environment has its SCAV_JOB_ID and SCAV_ATTEMPT. It returns how many
// groups it killed; a host that cannot be reached is an error (its workers
// may still run).
func (l *Launcher) StopOrphaned(ctx context.Context, spec plugins.RecoverSpec) (int, error) {
	cmd := jobKillCommand(spec.JobID, spec.Attempt)
	total := 0
	var errs []error
	for i, h := range l.opts.Hosts {
		n, err := l.killOn(ctx, h, cmd)
		if err != nil {
			errs = append(errs, fmt.Errorf("stop what is left of job %s attempt %d on %s: %w", spec.JobID, spec.Attempt, l.names[i], err))
			continue
		}
		if n > 0 {
			l.logger.Info("killed the workers a previous daemon left", zap.String("host", l.names[i]), zap.String("job", spec.JobID), zap.Int("groups", n))
		}
		total += n
	}
	return total, errors.Join(errs...)
}

// killOn runs cmd (a jobKillCommand) on host h and reads the count it prints.
func (l *Launcher) killOn(ctx context.Context, h Host, cmd string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.ProbeTimeout+killTimeout)
	defer cancel()
	c, err := l.dial(ctx, h)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	out, err := output(c, cmd)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return 0, fmt.Errorf("unexpected answer %q", out)
	}
	return n, nil
}

// jobKillCommand builds a command that SIGKILLs the process group of every
// process whose environment has SCAV_JOB_ID=job and SCAV_ATTEMPT=attempt
// (as a user can read only their own processes' environments, a login
// reaches only its own), and prints how many groups it killed.
func jobKillCommand(job string, attempt int) string {
	return "n=0; for d in /proc/[0-9]*; do " +
		`e=$(tr '\0' '\n' < "$d/environ" 2>/dev/null) || continue; ` +
		`printf '%s\n' "$e" | grep -qxF ` + Quote(plugins.EnvJobID+"="+job) + ` || continue; ` +
		`printf '%s\n' "$e" | grep -qxF ` + Quote(plugins.EnvAttempt+"="+strconv.Itoa(attempt)) + ` || continue; ` +
		`g=$(ps -o pgid= -p "${d#/proc/}" 2>/dev/null | tr -d ' '); ` +
		`[ -n "$g" ] && [ "$g" -gt 1 ] && kill -s KILL -- "-$g" 2>/dev/null && n=$((n+1)); ` +
		`done; echo "$n"`
}
