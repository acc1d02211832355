// Command scavd is Scavenger's node daemon: it runs the NATS server (or joins
// one), supervises the training jobs launched on this node, ingests their step
// telemetry and serves scavctl.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/scavenger-ml/scavenger/daemon"
	"github.com/scavenger-ml/scavenger/launchers/local"
	"github.com/scavenger-ml/scavenger/launchers/slurm"
	"github.com/scavenger-ml/scavenger/plugins"
)

func main() {
	// Started by a launcher-plugin host (the handshake cookie is set): serve
	// the built-in launcher named by SCAV_PLUGIN_LAUNCHER (default local).
	if os.Getenv(plugins.Handshake.MagicCookieKey) == plugins.Handshake.MagicCookieValue {
		if err := servePlugin(os.Getenv("SCAV_PLUGIN_LAUNCHER")); err != nil {
			fmt.Fprintln(os.Stderr, "scavd:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "scavd:", err)
		os.Exit(1)
	}
}

// run parses the command line and serves until SIGINT or SIGTERM.
func run(ctx context.Context, args []string) error {
	var cfg daemon.Config
	var level, format, launcher, plugin, pluginSum string
	var slurmOpts slurm.Options
	cmd := &cobra.Command{
		Use:   "scavd",
		Short: "Scavenger's node daemon",
		Long: `scavd supervises training jobs on this node for scavctl. It embeds a NATS
server with JetStream (listening on --listen, its store under --state-dir) or,
given --nats, joins an existing NATS server. Workers write step telemetry to the
unix socket --socket (only this user can write to it).

SIGINT or SIGTERM stop it: running jobs get SIGTERM and their grace period.`,
		Example:       "  scavd\n  scavd --listen 127.0.0.1:4233 --state-dir /var/lib/scavenger\n  scavd --nats nats://10.0.0.5:4222",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       daemon.Version,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(level, format)
			if err != nil {
				return err
			}
			defer log.Sync()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			switch {
			case plugin != "":
				l, closePlugin, err := daemon.LoadPlugin(ctx, plugin, pluginSum, log)
				if err != nil {
					return err
				}
				defer closePlugin()
				cfg.Launcher = l
			case launcher != "local":
				l, err := daemon.Builtins(daemon.BuiltinOptions{Slurm: slurmOpts}).New(launcher, log)
				if err != nil {
					return fmt.Errorf("--launcher: %w", err)
				}
				cfg.Launcher = l
			}
			return daemon.Run(ctx, cfg, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.StateDir, "state-dir", daemon.DefaultStateDir(), "state directory: JetStream store, socket, checkpoints")
	f.StringVar(&cfg.NATSURL, "nats", "", "join this NATS server instead of embedding one")
	f.StringVar(&cfg.Listen, "listen", daemon.DefaultListen, "address of the embedded NATS server (port 0: any free port)")
	f.StringVar(&cfg.Socket, "socket", "", "telemetry socket (default <state-dir>/scavd.sock)")
	f.StringVar(&cfg.Node, "node", "", "node name (default the host name)")
	f.DurationVar(&cfg.Retention.StepMaxAge, "step-retention", 0, "how long step records are kept (default 168h)")
	f.StringVar(&launcher, "launcher", "local", "built-in launcher that starts the workers: "+strings.Join(daemon.Builtins(daemon.BuiltinOptions{}).Names(), ", "))
	addSlurmFlags(cmd, &slurmOpts)
	f.StringVar(&plugin, "plugin", "", "an external launcher plugin binary to start the workers with (needs --plugin-sha256)")
	f.StringVar(&pluginSum, "plugin-sha256", "", "the sha256 of the --plugin binary, in hex: it is not run unless it matches")
	f.StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&format, "log-format", "console", "log format: console or json")
	cmd.SetArgs(args)
	return cmd.ExecuteContext(ctx)
}

// addSlurmFlags adds the flags of --launcher slurm.
func addSlurmFlags(cmd *cobra.Command, o *slurm.Options) {
	f := cmd.Flags()
	f.StringVar(&o.JobID, "slurm-job-id", "", "with --launcher slurm: run every attempt as an srun step of this allocation, so a relaunch waits in no queue (default $SLURM_JOB_ID; when neither is set, every attempt is submitted with sbatch)")
	f.StringVar(&o.Partition, "slurm-partition", "", "with --launcher slurm: submit to this partition and size jobs by its nodes (default the cluster's default partition)")
	f.DurationVar(&o.Grace, "slurm-grace", slurm.DefaultGrace, "with --launcher slurm: how long before the end of its time Slurm warns a submitted job with SIGUSR1 (sbatch --signal=B:USR1@grace; the workers checkpoint then), and how long the peers of a failed rank get between SIGTERM and SIGKILL")
	f.StringArrayVar(&o.SbatchArgs, "slurm-sbatch-arg", nil, "with --launcher slurm: an extra sbatch argument for submitted jobs, one per flag (e.g. --slurm-sbatch-arg=--account=ml --slurm-sbatch-arg=--time=4:00:00)")
	f.StringArrayVar(&o.SrunArgs, "slurm-srun-arg", nil, "with --launcher slurm: an extra srun argument for every job step, one per flag (e.g. --slurm-srun-arg=--gpus-per-task=1)")
	f.StringVar(&o.WorkDir, "slurm-work-dir", "", "with --launcher slurm: where batch scripts and job output files go; must be shared with the compute nodes (default $TMPDIR/scavenger-slurm)")
	f.DurationVar(&o.PollInterval, "slurm-poll", slurm.DefaultPollInterval, "with --launcher slurm: how often a submitted job's state and output are read")
}

// servePlugin serves one built-in launcher to a plugin host until it is done.
func servePlugin(name string) error {
	if name == "" {
		name = "local"
	}
	log := plugins.NewPluginLogger(zapcore.InfoLevel)
	reaper, err := local.StartReaper(context.Background(), log)
	if err != nil {
		return fmt.Errorf("serve launcher plugin: %w", err)
	}
	defer reaper.Stop()
	l, err := daemon.Builtins(daemon.BuiltinOptions{KillOnParentDeath: true, Reaper: reaper}).New(name, log)
	if err != nil {
		return fmt.Errorf("serve launcher plugin: %w", err)
	}
	plugins.Serve(l)
	return nil
}

func newLogger(level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	var enc zapcore.Encoder
	switch format {
	case "json":
		enc = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	case "console":
		enc = zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	default:
		return nil, fmt.Errorf("--log-format %q: use console or json", format)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(os.Stderr), lvl)).Named("scavd"), nil
}
