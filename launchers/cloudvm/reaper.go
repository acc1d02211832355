package cloudvm

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

// reaper releases idle pools and terminates the owner's instances that
// belong to no pool here (see the package comment), every ReapInterval
// until the launcher closes.
func (l *Launcher) reaper() {
	t := time.NewTicker(l.o.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		l.reap(l.ctx)
	}
}

// reap is one round of the reaper.
func (l *Launcher) reap(ctx context.Context) {
	var idle []string
	l.mu.Lock()
	for job, p := range l.pools {
		p.mu.Lock()
		if p.cur == nil && time.Since(p.idleSince) > l.o.IdleRelease {
			idle = append(idle, job)
		}
		p.mu.Unlock()
	}
	l.mu.Unlock()
	for _, job := range idle {
		l.log.Info("releasing an idle pool", zap.String("job", job), zap.Duration("idle", l.o.IdleRelease))
		if err := l.Release(ctx, job); err != nil {
			l.log.Warn("release idle pool", zap.Error(err))
		}
	}
	if time.Since(l.started) < l.o.AdoptGrace {
		return
	}
	if _, err := l.terminateUnowned(ctx, map[string]string{provider.TagOwner: l.o.Owner}); err != nil && ctx.Err() == nil {
		l.log.Warn("reap", zap.Error(err))
	}
}
