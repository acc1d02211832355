package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/launchers/builtin"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/scavenger-ml/scavenger/daemon"
)

// app holds what every command shares: global flags, the logger and the
// streams it writes to.
type app struct {
	natsURL  string
	stateDir string
	logLevel string
	output   string
	// launcher is the launcher a command needs (scavctl run --launcher):
	// the one a standalone daemon opens, and the one a running daemon must have.
	launcher string

	stdout, stderr io.Writer
	log            *zap.Logger
}

// exitError carries a process exit code through cobra (the job's, for run).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "scavctl",
		Short: "Run and watch distributed training jobs that Scavenger makes cheaper and faster",
		Long: `scavctl wraps a training command, launches its workers through the node daemon
(scavd), and shows what every step costs.

With no scavd running, scavctl starts one inside itself for the length of the
command (standalone mode), so the first command works on a fresh machine:

  scavctl run --workers 2 --batch-size 64 -- /usr/bin/python3 examples/cnn.py --steps 50

scavctl finds a daemon in this order: --nats, $SCAV_NATS, the discovery file a
running scavd writes in its state directory, then nats://` + api.DefaultListen + `.
A daemon scavctl starts itself runs workers on this machine, or, inside a Slurm
allocation, as job steps of it ($SCAV_LAUNCHER=local|slurm overrides).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			lvl, err := zapcore.ParseLevel(a.logLevel)
			if err != nil {
				return fmt.Errorf("--log-level %q: use debug, info, warn or error", a.logLevel)
			}
			a.log = newLogger(a.stderr, lvl)
			return nil
		},
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.AddCommand(newTopCmd(a))
	pf := root.PersistentFlags()
	pf.StringVar(&a.natsURL, "nats", os.Getenv("SCAV_NATS"), "NATS URL of the scavd to use (default: find one, or start one in process) [$SCAV_NATS]")
	pf.StringVar(&a.stateDir, "state-dir", envOr("SCAV_STATE_DIR", api.DefaultStateDir()), "state directory of the daemon to find or start [$SCAV_STATE_DIR]")
	pf.StringVar(&a.logLevel, "log-level", "warn", "log level of scavctl and its in-process daemon: debug, info, warn, error")
	root.AddCommand(newRunCmd(a), newJobsCmd(a), newStatusCmd(a), newLogsCmd(a), newStepsCmd(a), newStopCmd(a), newMoveCmd(a), newReportCmd(a), newSlurmCmd(a), newSimCmd(a), newPlanCmd(a), newPricesCmd(a), newCostCmd(a), newVersionCmd(a))
	root.AddCommand(newNodeCmd(a))
	return root
}

// addOutputFlag adds -o to a command whose output is data.
func addOutputFlag(a *app, cmd *cobra.Command) {
	cmd.Flags().StringVarP(&a.output, "output", "o", "table", "output format: table or json")
}

func (a *app) json() (bool, error) {
	switch a.output {
	case "", "table":
		return false, nil
	case "json":
		return true, nil
	}
	return false, fmt.Errorf("-o %q: use table or json", a.output)
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// connect finds a daemon, or with standalone starts one in this process.
// The returned function releases the connection and stops such a daemon.
func (a *app) connect(ctx context.Context, standalone bool) (*api.Client, func(), error) {
	const probe = 750 * time.Millisecond
	if a.natsURL != "" {
		c, err := api.Dial(ctx, a.natsURL, 3*time.Second)
		if err != nil {
			return nil, nil, fmt.Errorf("%w; start one with `scavd --listen ...`, or drop --nats/$SCAV_NATS to let scavctl start its own", err)
		}
		return c, c.Close, nil
	}
	var urls []string
	find := func() *api.Client {
		urls = api.DaemonURLs(a.stateDir)
		c, _ := api.DialFirst(ctx, urls, probe)
		return c
	}
	if c := find(); c != nil {
		if err := a.checkLauncher(ctx, c); err != nil {
			c.Close()
			return nil, nil, err
		}
		return c, c.Close, nil
	}
	if !standalone {
		return nil, nil, fmt.Errorf("%w (tried %v)", api.ErrNoDaemon, urls)
	}
	name := builtin.Standalone()
	if a.launcher != "" {
		name = a.launcher
	}
	launcher, releaseLauncher, err := builtin.Open(ctx, name, a.standaloneOptions(), a.log.Named("scavd"))
	if err != nil {
		return nil, nil, fmt.Errorf("launcher %s (--launcher, $SCAV_LAUNCHER): %w", name, err)
	}
	d, err := daemon.Start(ctx, daemon.Config{StateDir: a.stateDir, Listen: "127.0.0.1:0", Standalone: true, Launcher: launcher}, a.log.Named("scavd"))
	for deadline := time.Now().Add(10 * time.Second); errors.Is(err, daemon.ErrStateInUse) && time.Now().Before(deadline); {
		// Another scavctl is starting a daemon on this state directory: use it once it answers.
		time.Sleep(100 * time.Millisecond)
		if c := find(); c != nil {
			return c, c.Close, nil
		}
	}
	if err != nil {
		releaseLauncher()
		return nil, nil, fmt.Errorf("start in-process scavd: %w", err)
	}
	c, err := api.Dial(ctx, d.URL(), 5*time.Second)
	if err != nil {
		d.Close()
		releaseLauncher()
		return nil, nil, fmt.Errorf("connect to in-process scavd: %w", err)
	}
	return c, func() {
		c.Close()
		if n := len(d.Active()); n > 0 {
			fmt.Fprintf(a.stderr, "scavctl: waiting for %d other job(s) on this in-process scavd to end (Ctrl-C stops them)\n", n)
			_ = d.Wait(ctx)
		}
		if err := d.Close(); err != nil {
			a.log.Warn("stop in-process scavd", zap.Error(err))
		}
		releaseLauncher()
	}, nil
}

// standaloneOptions configure the launchers of a daemon scavctl starts
// itself: cloudvm takes a local cloud in the state directory (its catalog
// from $SCAV_CLOUD_CATALOG when set).
func (a *app) standaloneOptions() builtin.Options {
	return builtin.Options{KillOnParentDeath: true, Cloud: builtin.CloudOptions{Provider: "local",
		StateDir: filepath.Join(a.stateDir, "cloud"), Catalog: os.Getenv("SCAV_CLOUD_CATALOG"), NoTelemetryForward: true}}
}

// checkLauncher fails when the command needs a launcher (--launcher) that
// the daemon of c does not run.
func (a *app) checkLauncher(ctx context.Context, c *api.Client) error {
	if a.launcher == "" {
		return nil
	}
	info, err := c.Ping(ctx)
	if err != nil {
		return err
	}
	if info.Launcher != "" && info.Launcher != a.launcher {
		return fmt.Errorf("--launcher %s: the scavd at %s runs launcher %s (start one with `scavd --launcher %s`, or drop --launcher)", a.launcher, c.URL(), info.Launcher, a.launcher)
	}
	return nil
}

// withDaemon runs f against a running daemon; it starts none.
func (a *app) withDaemon(ctx context.Context, f func(context.Context, *api.Client) error) error {
	c, release, err := a.connect(ctx, false)
	if err != nil {
		return err
	}
	defer release()
	return f(ctx, c)
}

// withClient runs f against a daemon found or, failing that, started in process.
// Ctrl-C or SIGTERM cancels f's context.
func (a *app) withClient(ctx context.Context, f func(context.Context, *api.Client) error) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, release, err := a.connect(ctx, true)
	if err != nil {
		return err
	}
	defer release()
	return f(ctx, c)
}

func newLogger(w io.Writer, lvl zapcore.Level) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	enc.TimeKey = ""
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(w), lvl)
	return zap.New(core)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
