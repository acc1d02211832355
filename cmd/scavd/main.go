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
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/scavenger-ml/scavenger/daemon"
	"github.com/scavenger-ml/scavenger/launchers/local"
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
	var sshOpts func() daemon.SSHOptions // set with the flags below
	cmd := &cobra.Command{
		Use:   "scavd",
		Short: "Scavenger's node daemon",
		Long: `scavd supervises training jobs on this node for scavctl. It embeds a NATS
server with JetStream (listening on --listen, its store under --state-dir) or,
given --nats, joins an existing NATS server. Workers write step telemetry to the
unix socket --socket (only this user can write to it).

SIGINT or SIGTERM stop it: running jobs get SIGTERM and their grace period.`,
		Example: "  scavd\n  scavd --listen 127.0.0.1:4233 --state-dir /var/lib/scavenger\n  scavd --nats nats://10.0.0.5:4222\n" +
			"  scavd --launcher ssh --ssh-key ~/.ssh/id_ed25519 --ssh-host '10.0.0.5 slots=4' --ssh-host 'ubuntu@10.0.0.6:2222 slots=4'",
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
			if o := sshOpts(); launcher != "ssh" && (len(o.Hosts) > 0 || o.Inventory != "") {
				return fmt.Errorf("--ssh-host and --ssh-inventory are for --launcher ssh (the launcher is %q)", launcher)
			}
			switch {
			case plugin != "":
				l, closePlugin, err := daemon.LoadPlugin(ctx, plugin, pluginSum, log)
				if err != nil {
					return err
				}
				defer closePlugin()
				cfg.Launcher = l
			case launcher != "local":
				l, err := daemon.Builtins(daemon.BuiltinOptions{SSH: sshOpts()}).New(launcher, log)
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
	f.StringVar(&plugin, "plugin", "", "an external launcher plugin binary to start the workers with (needs --plugin-sha256)")
	f.StringVar(&pluginSum, "plugin-sha256", "", "the sha256 of the --plugin binary, in hex: it is not run unless it matches")
	sshOpts = sshFlags(f)
	f.StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&format, "log-format", "console", "log format: console or json")
	cmd.SetArgs(args)
	return cmd.ExecuteContext(ctx)
}

// sshFlags adds the --ssh-* flags of the ssh launcher to f and returns
// what they say once f is parsed.
func sshFlags(f *pflag.FlagSet) func() daemon.SSHOptions {
	var o daemon.SSHOptions
	forward := true
	f.StringArrayVar(&o.Hosts, "ssh-host", nil, `--launcher ssh: a host, "[user@]addr[:port] [slots=N]", e.g. "10.0.0.5 slots=4" `+
		`or "ubuntu@gpu1:2222,slots=8" (repeatable; ranks fill the hosts in order, rank 0's host is MASTER_ADDR)`)
	f.StringVar(&o.Inventory, "ssh-inventory", "", "--launcher ssh: a file of hosts, one --ssh-host line each; '#' starts a comment")
	f.StringVar(&o.User, "ssh-user", "", "--launcher ssh: login user of hosts that name none (default root)")
	f.StringArrayVar(&o.KeyFiles, "ssh-key", nil, "--launcher ssh: an unencrypted private key file to log in with (repeatable)")
	f.BoolVar(&o.UseAgent, "ssh-agent", false, "--launcher ssh: also use the keys of the agent at $SSH_AUTH_SOCK")
	f.StringArrayVar(&o.KnownHosts, "ssh-known-hosts", nil, "--launcher ssh: a known_hosts file the host keys must be in (repeatable; default ~/.ssh/known_hosts)")
	f.BoolVar(&forward, "ssh-forward-telemetry", true, "--launcher ssh: forward the telemetry socket to each host over SSH; "+
		"=false when a scavd runs on every host or they share this one's socket")
	return func() daemon.SSHOptions {
		o := o
		o.NoTelemetryForward = !forward
		return o
	}
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
