package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
)

// Wait blocks until no job runs on this daemon or ctx is done.
func (d *Daemon) Wait(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for len(d.jobs.Active()) > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// Close stops every job (each with its grace), the ingest socket, the NATS
// connection and the embedded server. It is idempotent.
func (d *Daemon) Close() error {
	d.closeOnce.Do(func() { d.closeErr = d.shutdown() })
	return d.closeErr
}

func (d *Daemon) shutdown() error {
	var errs []error
	if d.lock != nil {
		removeDiscovery(d.cfg.StateDir, os.Getpid())
	}
	errs = append(errs, d.stopNode())
	if d.stopDisk != nil {
		d.stopDisk()
	}
	if d.stopSweep != nil {
		d.stopSweep()
	}
	if d.jobs != nil {
		grace := d.cfg.StopGrace
		if grace <= 0 {
			grace = DefaultStopGrace
		}
		ctx, cancel := context.WithTimeout(d.root, grace)
		d.jobs.Close(ctx)
		cancel()
	}
	if d.dash != nil {
		d.dash.Close(d.root)
	}
	if d.api != nil {
		d.api.Close(d.root)
	}
	if d.ingest != nil {
		d.ingest.Close()
	}
	if d.index != nil {
		d.index.Close()
	}
	if d.nc != nil {
		if err := d.nc.FlushTimeout(5 * time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, fmt.Errorf("flush nats: %w", err))
		}
		d.nc.Close()
	}
	if d.ns != nil {
		d.ns.Shutdown()
		d.ns.WaitForShutdown()
	}
	if d.releaseLauncher != nil {
		d.releaseLauncher()
	}
	if d.cancelRoot != nil {
		d.cancelRoot()
	}
	if d.lock != nil {
		d.lock.Close()
	}
	return errors.Join(errs...)
}
