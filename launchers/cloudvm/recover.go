package cloudvm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/plugins"
)

var _ plugins.Recoverer = (*Launcher)(nil)

// Recover reattaches to an attempt a previous daemon started, after a
// restart: its instances outlived the daemon (they are a cloud's), and so
// did its workers (their ranks are detached: launchers/ssh). It rebuilds
// the job's pool from its state directory — its keys, its charges — and
// the job's live instances (those already charged go on being billed as
// they were; none is charged twice), connects to them (notice watchers for
// the spot ones) and follows the workers again; their telemetry goes to
// the daemon socket they were started with (a pool that runs here, its
// attempt ended, is followed again the same way). No step is trained twice: the
// workers never stopped. A job whose pool, keys or workers are gone is
// ErrUnknownHandle: the daemon then stops what is left (StopOrphaned) and
// resumes it from its checkpoint.
func (l *Launcher) Recover(ctx context.Context, rs plugins.RecoverSpec) (plugins.Handle, error) {
	fail := func(err error) (plugins.Handle, error) {
		return nil, fmt.Errorf("recover job %s attempt %d: %w", rs.JobID, rs.Attempt, err)
	}
	l.mu.Lock()
	_, known := l.pools[rs.JobID]
	l.mu.Unlock()
	socket, err := os.ReadFile(filepath.Join(l.o.StateDir, "pools", rs.JobID, socketFile))
	if err != nil {
		return fail(fmt.Errorf("%w: %w", plugins.ErrUnknownHandle, err))
	}
	p, err := l.pool(rs.JobID, true)
	if err != nil {
		return fail(err)
	}
	h, err := l.reattach(ctx, p, rs, string(socket))
	if err != nil {
		if !known { // a pool made for nothing: StopOrphaned, or a new attempt, starts afresh
			l.mu.Lock()
			if l.pools[rs.JobID] == p && p.cur == nil {
				delete(l.pools, rs.JobID)
			}
			l.mu.Unlock()
			l.closeMembers(p)
		}
		return fail(err)
	}
	return h, nil
}

// reattach adopts the job's live instances into p, connects to them and
// follows the attempt's workers on them.
func (l *Launcher) reattach(ctx context.Context, p *pool, rs plugins.RecoverSpec, socket string) (plugins.Handle, error) {
	p.start.Lock()
	defer p.start.Unlock()
	live, err := l.list(ctx, map[string]string{provider.TagOwner: l.o.Owner, provider.TagJob: rs.JobID})
	if err != nil {
		return nil, fmt.Errorf("list the job's instances: %w", err)
	}
	var ids []string
	for _, in := range live {
		if !in.Alive() {
			continue
		}
		switch {
		case p.member(in.ID) != nil: // the pool had it (a recovery on the same launcher)
		case p.charged(in.ID):
			p.mu.Lock()
			p.members[in.ID] = &member{inst: in}
			p.mu.Unlock()
		default:
			l.addMember(p, in) // launched as the daemon died: billed from its launch
		}
		ids = append(ids, in.ID)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no instance of the job runs: %w", plugins.ErrUnknownHandle)
	}
	hosts, err := l.ready(ctx, p, ids)
	if err != nil {
		return nil, err
	}
	if err := p.writeKnownHosts(hosts); err != nil {
		return nil, err
	}
	sl, err := l.sshOver(p, hosts)
	if err != nil {
		return nil, err
	}
	h, err := sl.Reattach(ctx, rs, socket)
	if err != nil {
		_ = sl.Close()
		return nil, err
	}
	p.log.Info("attempt recovered", zap.Int("attempt", rs.Attempt), zap.Strings("instances", ids))
	return l.running(p, h, sl, ids), nil
}

// closeMembers closes the launcher's connections to p's members and ends
// their notice watchers (a pool given up).
func (l *Launcher) closeMembers(p *pool) {
	for _, m := range p.snapshot() {
		if m.stop != nil {
			m.stop()
		}
		if m.conn != nil {
			_ = m.conn.Close()
		}
	}
}
