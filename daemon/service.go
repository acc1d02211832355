package daemon

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/daemon/sdnotify"
)

// statusEvery is how often the STATUS= line sent to systemd is refreshed.
const statusEvery = 5 * time.Second

// notifyService keeps the service manager informed while ctx lasts: READY=1
// with a first STATUS= line now, then the STATUS= line whenever it changes
// and, when a watchdog is asked for, WATCHDOG=1 at its interval as long as
// the daemon is healthy. It returns once ctx is done; Run owns and joins it.
func (d *Daemon) notifyService(ctx context.Context, sd *sdnotify.Notifier, watchdog time.Duration, log *zap.Logger) {
	if !sd.Enabled() {
		<-ctx.Done()
		return
	}
	status := d.status()
	if err := sd.Notify(sdnotify.Ready, sdnotify.Status(status)); err != nil {
		log.Warn("notify systemd", zap.Error(err))
	}
	every := statusEvery
	if watchdog > 0 && watchdog < every {
		every = watchdog
	}
	t := time.NewTicker(every)
	defer t.Stop()
	lastPing := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var msgs []string
		if s := d.status(); s != status {
			status = s
			msgs = append(msgs, sdnotify.Status(s))
		}
		if watchdog > 0 && time.Since(lastPing) >= watchdog-every/2 {
			if err := d.healthy(ctx, watchdog/2); err != nil {
				// No ping: if this lasts, systemd restarts the daemon.
				log.Warn("watchdog ping withheld", zap.Error(err))
			} else {
				msgs = append(msgs, sdnotify.Watchdog)
				lastPing = time.Now()
			}
		}
		if err := sd.Notify(msgs...); err != nil {
			log.Warn("notify systemd", zap.Error(err))
		}
	}
}

// status is the one-line summary systemctl status shows.
func (d *Daemon) status() string {
	jobs := d.jobs.Active()
	n := len(jobs)
	switch n {
	case 0:
		return "no jobs running; nats " + d.URL()
	case 1:
		return "1 job running: " + jobs[0]
	}
	if len(jobs) > 5 {
		jobs = append(jobs[:5:5], "...")
	}
	return fmt.Sprintf("%d jobs running: %s", n, strings.Join(jobs, ", "))
}

// healthy checks what the watchdog vouches for: the supervisor answers (its
// lock is free, as status showed) and the embedded NATS server does a round
// trip in time. An external server being away is not the daemon's fault and
// a restart would not help, so it does not count.
func (d *Daemon) healthy(ctx context.Context, timeout time.Duration) error {
	if d.ns == nil {
		return nil
	}
	if timeout > 2*time.Second {
		timeout = 2 * time.Second
	}
	if err := d.nc.FlushTimeout(timeout); err != nil {
		return fmt.Errorf("embedded nats round trip: %w", err)
	}
	return ctx.Err()
}
