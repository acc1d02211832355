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
	"strings"
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
	endpoint string // --api
	// stateDirGiven: --state-dir or $SCAV_STATE_DIR named the daemon's
	// state directory, whose daemon it must then be.
	stateDirGiven bool
	apiOpts       api.Options
	stateDir      string
	logLevel      string
	output        string
	// launcher is the launcher a command needs (scavctl run --launcher):
	// the one a standalone daemon opens, and the one a running daemon must have.
	launcher string
	// standalone (--standalone) lets a command that starts a daemon inside
	// itself do so even where a daemon's socket is there but no daemon answers.
	standalone bool

	stdout, stderr io.Writer
	log            *zap.Logger
	logOut         *logWriter // the log's writer: stderr, under run's status line
}

// exitError carries a process exit code through cobra (the job's, for run),
// and what to tell the user, when that was not said already.
type exitError struct {
	code int
	msg  string
}

// Error is the message main prints, or a line naming the exit code.
func (e exitError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return fmt.Sprintf("exit status %d", e.code)
}

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "scavctl",
		Short: "Run and watch distributed training jobs that Scavenger makes cheaper and faster",
		Long: `scavctl wraps a training command, launches its workers through the node daemon
(scavd), and shows what every step costs.

With no scavd running, scavctl starts one inside itself for the length of the
command (standalone mode, which it says in one line naming the state
directory), so the first command works on a fresh machine:

  scavctl run --workers 2 --batch-size 64 -- /usr/bin/python3 examples/cnn.py --steps 50

scavctl finds a daemon in this order: --api, $SCAV_API, the API socket of the
state directory (--state-dir), then the system daemon's (` + api.SystemStateDir + `/` + api.SocketName + `).
A daemon's socket that is there but does not answer (its scavd died or
hangs) stops scavctl with that said, rather than a quiet daemon of its own:
--standalone runs one inside the command anyway.
A configuration is written in one notation everywhere (top, report, sim,
plan, status): K workers x global batch B, "2x128", after the machine type
when the job has one, "loc.half 2x128" ("2x-": the script's own batch; "(2
nodes)" when it spans several). Decision lines say it in words, "2 workers ×
batch 128".
Commands that take a JOB take its id, a prefix of its id that no other job
of yours shares, or its name (the newest job of that name).

The daemon knows who you are from the kernel: you act on and read your own jobs
(root on everyone's), and a root daemon runs your jobs as you.
A daemon scavctl starts itself runs workers on this machine, or, inside a Slurm
allocation, as job steps of it ($SCAV_LAUNCHER=local|slurm overrides).`,
		Version:       api.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			lvl, err := zapcore.ParseLevel(a.logLevel)
			if err != nil {
				return fmt.Errorf("--log-level %q: use debug, info, warn or error", a.logLevel)
			}
			a.logOut = &logWriter{w: a.stderr}
			a.log = newLogger(a.logOut, lvl)
			a.stateDirGiven = a.stateDirGiven || cmd.Flags().Changed("state-dir")
			return nil
		},
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.AddCommand(newTopCmd(a))
	pf := root.PersistentFlags()
	pf.StringVar(&a.endpoint, "api", os.Getenv("SCAV_API"), "the scavd API to use: a unix socket's path, or https://HOST:PORT with a token (default: the state directory's daemon, then the system one, else start one in process) [$SCAV_API]")
	pf.StringVar(&a.apiOpts.Token, "token-file", "", "with --api https://...: a file holding the bearer token the daemon's api_tokens maps to you (default $SCAV_API_TOKEN)")
	pf.StringVar(&a.apiOpts.CAFile, "api-ca", "", "with --api https://...: the CA certificate that signed the daemon's (default: the system's roots)")
	a.stateDirGiven = os.Getenv("SCAV_STATE_DIR") != ""
	pf.StringVar(&a.stateDir, "state-dir", envOr("SCAV_STATE_DIR", api.DefaultStateDir()), "state directory of the daemon to find or start [$SCAV_STATE_DIR]")
	pf.BoolVar(&a.standalone, "standalone", false, "when no scavd answers, run one inside this command even though a daemon's socket is there (a scavd that died or hangs; by default scavctl stops and says so)")
	pf.StringVar(&a.logLevel, "log-level", "warn", "log level of scavctl and its in-process daemon: debug, info, warn, error")
	root.AddCommand(newRunCmd(a), newJobsCmd(a), newStatusCmd(a), newLogsCmd(a), newStepsCmd(a), newStopCmd(a), newMoveCmd(a), newReportCmd(a), newKeepCmd(a), newSlurmCmd(a), newSimCmd(a), newAttachCmd(a), newPlanCmd(a), newPricesCmd(a), newCostCmd(a), newModelsCmd(a), newVersionCmd(a))
	root.AddCommand(newNodeCmd(a), newDashboardCmd(a))
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

// endpoints are the API sockets to try: a state directory given (flag or
// $SCAV_STATE_DIR) is that directory's daemon and no other; else the
// default one's, then the system daemon's.
func (a *app) endpoints() []string {
	if a.stateDirGiven {
		return []string{filepath.Join(a.stateDir, api.SocketName)}
	}
	return api.Endpoints(a.stateDir)
}

// dialGiven connects to the daemon --api names.
func (a *app) dialGiven(ctx context.Context, timeout time.Duration) (*api.Client, error) {
	o := a.apiOpts
	if o.Token != "" {
		b, err := os.ReadFile(o.Token)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		o.Token = strings.TrimSpace(string(b))
	}
	return api.DialOptions(ctx, a.endpoint, timeout, o)
}

// connect finds a daemon, or with standalone starts one in this process.
// The returned function releases the connection and stops such a daemon.
func (a *app) connect(ctx context.Context, standalone bool) (*api.Client, func(), error) {
	const probe = 750 * time.Millisecond
	if a.endpoint != "" {
		c, err := a.dialGiven(ctx, 3*time.Second)
		if err != nil {
			return nil, nil, fmt.Errorf("%w; start one with `scavd`, or drop --api/$SCAV_API to let scavctl start its own", err)
		}
		if err := a.checkLauncher(ctx, c); err != nil {
			c.Close()
			return nil, nil, err
		}
		return c, c.Close, nil
	}
	var urls []string
	find := func() *api.Client {
		urls = a.endpoints()
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
	if sock := silentSocket(urls); sock != "" && !(standalone && a.standalone) {
		err := fmt.Errorf("%w: the scavd socket %s is there, but no daemon answers on it: its scavd died or hangs (its log says why; the service's: systemctl status scavd); start it again (systemctl restart scavd, or scavd --state-dir %s)",
			api.ErrNoDaemon, sock, filepath.Dir(sock))
		if standalone {
			err = fmt.Errorf("%w, or add --standalone to run a scavd inside this command, on state directory %s", err, a.stateDir)
		}
		return nil, nil, err
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
	d, err := daemon.Start(ctx, daemon.Config{StateDir: a.stateDir, Listen: "127.0.0.1:0", Standalone: true, Launcher: launcher,
		DashboardListen: "127.0.0.1:0"}, a.log.Named("scavd"))
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
	c, err := api.Dial(ctx, d.APISocket(), 5*time.Second)
	if err != nil {
		d.Close()
		releaseLauncher()
		return nil, nil, fmt.Errorf("connect to in-process scavd: %w", err)
	}
	fmt.Fprintf(a.stderr, "scavctl: no scavd is running, so one runs inside this command, on state directory %s, and stops with it\n", a.stateDir)
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

// silentSocket returns the first of the API sockets urls that is there
// although no daemon answered on it, unless it is what a daemon scavctl ran
// inside itself left behind (its discovery file says so): a scavd that
// died or hangs, which scavctl must not quietly stand in for.
func silentSocket(urls []string) string {
	for _, u := range urls {
		if fi, err := os.Stat(u); err != nil || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		if info, _ := api.ReadDiscovery(filepath.Dir(u)); info.Standalone && info.API == u {
			continue
		}
		return u
	}
	return ""
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
