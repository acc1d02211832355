package ssh

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/supervisor"
	"github.com/scavenger-ml/scavenger/plugins"
)

// Reattach follows again the detached ranks (Options.Detach) of an attempt
// a previous daemon started on these hosts, which outlived it: it finds
// their files on the hosts, connects, listens again for their telemetry on
// the socket path they were given (forwarding it to socket, the daemon's;
// "" for none) and returns a handle whose Wait ends with the ranks. The
// output written from now on goes to rs.Output. An attempt whose files are
// on no host, or whose rank 0 is not rs.HandleID, is ErrUnknownHandle; a
// failure leaves the workers running.
func (l *Launcher) Reattach(ctx context.Context, rs plugins.RecoverSpec, socket string) (plugins.Handle, error) {
	fail := func(err error) (plugins.Handle, error) {
		return nil, fmt.Errorf("reattach to job %s attempt %d: %w", rs.JobID, rs.Attempt, err)
	}
	if !l.opts.Detach {
		return fail(fmt.Errorf("its ranks are not detached: %w", plugins.ErrUnsupported))
	}
	base := attemptDir(rs.JobID, rs.Attempt)
	places, pids, err := l.findRanks(ctx, base)
	if err != nil {
		return fail(err)
	}
	if len(places) == 0 {
		return fail(fmt.Errorf("no host has its ranks: %w", plugins.ErrUnknownHandle))
	}
	if id := l.opts.Hosts[places[0].host].Addr + ":" + strconv.Itoa(pids[0]); id != rs.HandleID {
		return fail(fmt.Errorf("its rank 0 is %s, not %q: %w", id, rs.HandleID, plugins.ErrUnknownHandle))
	}
	a := newAttempt(l, plugins.AttemptSpec{JobID: rs.JobID, Attempt: rs.Attempt, Output: rs.Output, Socket: socket}, places)
	if err := a.connect(ctx, a.logger); err != nil {
		return fail(err)
	}
	for r, p := range places {
		rp, err := a.startRank(ctx, r, a.conns[p.host], followCommand(base, r))
		if rp != nil {
			a.ranks = append(a.ranks, rp)
		}
		if err != nil { // the workers go on: only the following ends
			for _, rp := range a.ranks {
				_ = rp.sess.Close()
			}
			a.closeForwarders(0)
			a.closeConns()
			return fail(fmt.Errorf("follow rank %d: %w", r, err))
		}
	}
	a.logger = a.logger.With(zap.String("id", a.ID()))
	a.Supervisor = supervisor.New(supervisor.Config{N: len(a.ranks), Grace: l.opts.Grace, Logger: a.logger}, a)
	a.logger.Info("reattached", zap.Int("processes", len(places)))
	go a.supervise()
	return a, nil
}

// findRanks lists, on every host, the detached ranks of the attempt in base
// and their wrappers' pids: rank r's placement and pid at index r. Ranks
// missing in between are an error; a host that cannot be reached too
// (its ranks may be there).
func (l *Launcher) findRanks(ctx context.Context, base string) ([]placement, []int, error) {
	cmd := `for d in ` + base + `/rank*; do [ -s "$d/pid" ] && echo "${d##*/rank} $(cat "$d/pid")"; done; exit 0`
	type found struct{ host, pid int }
	ranks := map[int]found{}
	var errs []error
	for i, h := range l.opts.Hosts {
		c, err := l.dial(ctx, h)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out, err := output(c, cmd)
		_ = c.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("host %s: %w", h.Addr, err))
			continue
		}
		for line := range strings.Lines(out) {
			var r, pid int
			if _, err := fmt.Sscanf(line, "%d %d", &r, &pid); err == nil && r >= 0 && pid > 1 {
				ranks[r] = found{i, pid}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	places := make([]placement, len(ranks))
	pids := make([]int, len(ranks))
	for r := range places {
		f, ok := ranks[r]
		if !ok {
			return nil, nil, fmt.Errorf("rank %d of %d is on no host", r, len(ranks))
		}
		places[r], pids[r] = placement{host: f.host}, f.pid
	}
	return places, pids, nil
}
