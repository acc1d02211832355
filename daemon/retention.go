package daemon

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// sweepEvery is how often the daemon removes the finished jobs past their
// retention (Config.JobRetention), after a first sweep at start.
const sweepEvery = time.Hour

// startSweep removes, now and every sweepEvery, the finished jobs of this
// node past their retention, in a goroutine that stopSweep ends and joins.
func (d *Daemon) startSweep() {
	ctx, cancel := context.WithCancel(d.root)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		everyTick(ctx, sweepEvery, func(ctx context.Context) {
			if _, err := d.jobs.Sweep(ctx, d.cfg.JobRetention, time.Now()); err != nil && ctx.Err() == nil {
				d.log.Warn("remove jobs past their retention", zap.Error(err))
			}
		})
	}()
	d.stopSweep = func() {
		cancel()
		wg.Wait()
	}
}
