package daemon

import (
	"context"
	"fmt"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
)

// statusEvery is how often the STATUS= line sent to systemd is refreshed.
const statusEvery = 5 * time.Second

// notify sends systemd one message (sd_notify(3)) of the given KEY=VALUE
// assignments, through go-systemd to $NOTIFY_SOCKET; none goes without it.
func notify(log *zap.Logger, assignments ...string) {
	if len(assignments) == 0 {
		return
	}
	if _, err := sd.SdNotify(false, strings.Join(assignments, "\n")); err != nil {
		log.Warn("notify systemd", zap.Error(err))
	}
}

// statusLine is the STATUS= assignment of a one-line description.
func statusLine(s string) string {
	return "STATUS=" + strings.ReplaceAll(s, "\n", " ")
}

// notifyService keeps the service manager informed while ctx lasts: READY=1
// with a first STATUS= line now, then the STATUS= line whenever it changes
// and, when a watchdog is asked for, WATCHDOG=1 at its interval as long as
// the daemon is healthy. It returns once ctx is done; Run owns and joins it.
func (d *Daemon) notifyService(ctx context.Context, enabled bool, watchdog time.Duration, log *zap.Logger) {
	if !enabled {
		<-ctx.Done()
		return
	}
	status := d.status()
	notify(log, sd.SdNotifyReady, statusLine(status))
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
			msgs = append(msgs, statusLine(s))
		}
		if watchdog > 0 && time.Since(lastPing) >= watchdog-every/2 {
			if err := d.healthy(ctx, watchdog/2); err != nil {
				// No ping: if this lasts, systemd restarts the daemon.
				log.Warn("watchdog ping withheld", zap.Error(err))
			} else {
				msgs = append(msgs, sd.SdNotifyWatchdog)
				lastPing = time.Now()
			}
		}
		notify(log, msgs...)
	}
}

// notifyStopping tells systemd, with Config.Notify, that the daemon stops
// with jobs running.
func (d *Daemon) notifyStopping(jobs int) {
	if d.cfg.Notify {
		notify(d.log.Named("systemd"), sd.SdNotifyStopping, statusLine(fmt.Sprintf("stopping %d jobs", jobs)))
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
