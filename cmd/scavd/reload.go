package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// liveDaemon is what a reload changes in the running daemon.
type liveDaemon interface {
	SetRetention(ctx context.Context, r history.Retention) error
}

// reloader applies the config file again on SIGHUP: the keys in reloadable
// change live, a change to any other key is logged as waiting for a restart,
// and a file that does not load leaves everything as it was.
type reloader struct {
	loader  loader
	current settings // what runs now
	level   zap.AtomicLevel
	daemon  liveDaemon
	notify  bool // tell systemd (go-systemd's SdNotify, to $NOTIFY_SOCKET)
	log     *zap.Logger
}

// run reloads on every signal from hup until ctx is done, telling systemd
// it is reloading (RELOADING=1) and when it is done (READY=1).
func (r *reloader) run(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		// systemd 253 and later ask RELOADING=1 for the monotonic time.
		r.tell(sd.SdNotifyReloading + "\n" + sd.SdNotifyMonotonicUsec())
		if err := r.reload(ctx); err != nil {
			r.log.Error("config reload failed; the running config stays", zap.Error(err))
		}
		if ctx.Err() != nil {
			return // stopping: READY=1 must not follow STOPPING=1
		}
		r.tell(sd.SdNotifyReady)
	}
}

// tell sends systemd a notification (sd_notify(3)) when r.notify is set.
func (r *reloader) tell(state string) {
	if !r.notify {
		return
	}
	if _, err := sd.SdNotify(false, state); err != nil {
		r.log.Warn("notify systemd", zap.Error(err))
	}
}

// reload loads the settings and applies what can change live. A file that
// does not load changes nothing; a key that fails to apply keeps its running
// value and is reported, the others are applied.
func (r *reloader) reload(ctx context.Context) error {
	next, err := r.loader.load()
	if err != nil {
		return fmt.Errorf("reload config %s: %w", r.loader.path, err)
	}
	var applied, pending []string
	var errs []error
	for _, key := range changedKeys(r.current, next.settings) {
		if !reloadable[key] {
			pending = append(pending, key)
			continue
		}
		if err := r.apply(ctx, key, next.settings); err != nil {
			errs = append(errs, err)
			continue
		}
		applied = append(applied, key)
	}
	if len(errs) == 0 {
		r.log.Info("config reloaded", zap.String("file", next.path), zap.Strings("applied", applied),
			zap.String("log_level", r.level.String()), zap.Duration("step_retention", r.current.StepRetention))
	}
	if len(pending) > 0 {
		r.log.Warn("config changes wait for a restart", zap.Strings("keys", pending))
	}
	if len(errs) > 0 {
		return fmt.Errorf("reload config %s: %w", next.path, errors.Join(errs...))
	}
	return nil
}

// apply changes one reloadable key of the running daemon to its value in
// next, and records it as running.
func (r *reloader) apply(ctx context.Context, key string, next settings) error {
	switch key {
	case "log_level":
		if err := r.level.UnmarshalText([]byte(next.LogLevel)); err != nil {
			return fmt.Errorf("log_level: %w", err)
		}
		r.current.LogLevel = next.LogLevel
	case "step_retention":
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := r.daemon.SetRetention(ctx, history.Retention{StepMaxAge: next.StepRetention}); err != nil {
			return fmt.Errorf("step_retention: %w", err)
		}
		r.current.StepRetention = next.StepRetention
	default:
		return fmt.Errorf("%s: not reloadable", key)
	}
	return nil
}
