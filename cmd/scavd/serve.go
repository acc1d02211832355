package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/daemon"
	"github.com/scavenger-ml/scavenger/launchers/builtin"
	"github.com/scavenger-ml/scavenger/plugins"
)

// serve runs the daemon with the settings l loads until SIGINT or SIGTERM,
// reloading them on SIGHUP.
func serve(ctx context.Context, l loader) error {
	// SIGHUP is caught before anything else starts, so that an early one
	// cannot kill the daemon.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cfg, err := l.load()
	if err != nil {
		return invalidConfig(err)
	}
	log, level, err := newLogger(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	defer log.Sync()
	if cfg.path != "" {
		log.Info("config loaded", zap.String("file", cfg.path))
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	dcfg := cfg.daemonConfig()
	open := func() (plugins.Launcher, func(), error) {
		return builtin.Open(ctx, cfg.Launcher, cfg.builtinOptions(), log)
	}
	if cfg.Plugin != "" {
		open = func() (plugins.Launcher, func(), error) {
			return builtin.OpenPlugin(ctx, cfg.Plugin, cfg.PluginSHA256, log)
		}
	}
	lc, release, err := open()
	if err != nil {
		return err
	}
	defer release()
	dcfg.Launcher = lc
	dcfg.Notify = os.Getenv("NOTIFY_SOCKET") != ""
	if dcfg.Watchdog, err = watchdogInterval(); err != nil {
		log.Warn("systemd watchdog off", zap.Error(err))
	}
	d, err := daemon.Start(ctx, dcfg, log)
	if err != nil {
		return err
	}
	// A SIGHUP that came during Start waits in hup until now.
	r := &reloader{loader: l, current: cfg.settings, level: level, daemon: d, notify: dcfg.Notify, log: log.Named("config")}
	reloadCtx, stopReload := context.WithCancel(ctx)
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		r.run(reloadCtx, hup)
	}()
	defer func() {
		stopReload()
		<-reloaded
	}()
	return d.Serve(ctx)
}

// check prints the effective settings to w, or returns every problem.
func check(w io.Writer, l loader) error {
	cfg, err := l.load()
	if err != nil {
		return invalidConfig(err)
	}
	text, err := cfg.yamlText()
	if err != nil {
		return err
	}
	if _, err = io.WriteString(w, text); err != nil {
		return err
	}
	if err := daemon.CheckFiles(cfg.daemonConfig()); err != nil {
		return fmt.Errorf("the files scavd would use are unfit:\n  %s", strings.ReplaceAll(err.Error(), "\n", "\n  "))
	}
	_, err = fmt.Fprintf(w, "# state directory %s and its secrets: fit (scavd's user's own, writable by no one else)\n", cfg.StateDir)
	return err
}

// checkStateStore reads the store of the state directory the settings of l
// name and prints what it found; a damaged store is an error (exit 1).
func checkStateStore(w io.Writer, l loader) error {
	cfg, err := l.load()
	if err != nil {
		return invalidConfig(err)
	}
	lines, ok, err := daemon.CheckStore(cfg.StateDir)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(w, strings.Join(lines, "\n")+"\n"); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("the store of %s is damaged; scavd repairs what it can when it starts, keeping the damaged files in %s", cfg.StateDir, "damaged-<time>")
	}
	return nil
}

// cleanupCloud destroys the local clouds no scavd has open (--cloud-cleanup)
// and prints what it destroyed, one a line.
func cleanupCloud(ctx context.Context, w io.Writer, l loader) error {
	cfg, err := l.load()
	if err != nil {
		return invalidConfig(err)
	}
	log, _, err := newLogger(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	done, err := builtin.CleanupCloud(ctx, cfg.cloudOptions(), log)
	for _, d := range done {
		fmt.Fprintln(w, "destroyed local cloud", d)
	}
	if len(done) == 0 && err == nil {
		fmt.Fprintln(w, "no local cloud to destroy")
	}
	return err
}

// invalidConfig lists every problem, one a line.
func invalidConfig(err error) error {
	lines := strings.Split(err.Error(), "\n")
	what := "1 problem"
	if len(lines) > 1 {
		what = fmt.Sprintf("%d problems", len(lines))
	}
	return fmt.Errorf("invalid config, %s:\n  %s", what, strings.Join(lines, "\n  "))
}

// watchdogInterval is how often to ping systemd's watchdog: half the
// timeout that $WATCHDOG_USEC asks of this process ($WATCHDOG_PID), as
// sd_watchdog_enabled(3) advises, or 0 for none. It takes both variables out
// of the environment: the watchdog is this process's, not its children's
// ($NOTIFY_SOCKET stays, for go-systemd's SdNotify; plugins.InheritEnv keeps
// it from the workers, and the unit's NotifyAccess=main has systemd heed
// only scavd).
func watchdogInterval() (time.Duration, error) {
	timeout, err := sd.SdWatchdogEnabled(true)
	if err != nil {
		return 0, fmt.Errorf("systemd watchdog: %w", err)
	}
	return timeout / 2, nil
}
