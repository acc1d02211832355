package main

import (
	"context"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/daemon/sdnotify"
)

// reloader applies the config file again on SIGHUP: the keys in reloadable
// change live, a change to any other key is logged as waiting for a restart,
// and a file that does not load leaves everything as it was.
type reloader struct {
	loader  loader
	current settings // what runs now
	level   zap.AtomicLevel
	notify  *sdnotify.Notifier
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
		if err := r.notify.Notify(sdnotify.Reloading()...); err != nil {
			r.log.Warn("notify systemd", zap.Error(err))
		}
		if err := r.reload(); err != nil {
			r.log.Error("config reload failed; the running config stays", zap.Error(err))
		}
		if err := r.notify.Notify(sdnotify.Ready); err != nil {
			r.log.Warn("notify systemd", zap.Error(err))
		}
	}
}

// reload loads the settings and applies what can change live.
func (r *reloader) reload() error {
	next, err := r.loader.load()
	if err != nil {
		return fmt.Errorf("reload config %s: %w", r.loader.path, err)
	}
	var applied, pending []string
	for _, key := range changedKeys(r.current, next.settings) {
		if reloadable[key] {
			applied = append(applied, key)
		} else {
			pending = append(pending, key)
		}
	}
	// The keys in reloadable, applied.
	if next.LogLevel != r.current.LogLevel {
		if err := r.level.UnmarshalText([]byte(next.LogLevel)); err != nil {
			return fmt.Errorf("reload config: log_level: %w", err)
		}
		r.current.LogLevel = next.LogLevel
	}
	r.log.Info("config reloaded", zap.String("file", next.path), zap.Strings("applied", applied),
		zap.String("log_level", r.level.String()))
	if len(pending) > 0 {
		r.log.Warn("config changes wait for a restart", zap.Strings("keys", pending))
	}
	return nil
}
