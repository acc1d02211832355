// Command scavd is Scavenger's node daemon: it runs the NATS server (or joins
// one), supervises the training jobs launched on this node, ingests their step
// telemetry and serves scavctl.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/launchers/builtin"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/scavenger-ml/scavenger/plugins/goplugin"
)

func main() {
	// Started by a launcher-plugin host (the handshake cookie is set): serve
	// the built-in launcher named by SCAV_PLUGIN_LAUNCHER (default local).
	if os.Getenv(goplugin.Handshake.MagicCookieKey) == goplugin.Handshake.MagicCookieValue {
		if err := servePlugin(os.Getenv("SCAV_PLUGIN_LAUNCHER")); err != nil {
			fmt.Fprintln(os.Stderr, "scavd:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scavd:", err)
		os.Exit(1)
	}
}

// run parses the command line and serves until SIGINT or SIGTERM; stdout
// is where --check-config prints.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	var flags settings
	var config string
	var checkConfig, checkStore, cloudCleanup bool
	cmd := &cobra.Command{
		Use:   "scavd",
		Short: "Scavenger's node daemon",
		Long: `scavd supervises training jobs on this node for scavctl. It embeds a NATS
server with JetStream (listening on --listen, its store under --state-dir) or,
given --nats, joins an existing NATS server. Workers write step telemetry to the
unix socket --socket (only this user can write to it).

Settings come from the built-in defaults, then the config file (--config, or
` + DefaultConfigFile + ` when it exists), then the flags given: every
flag is also a key of the file (--log-level is log_level). --check-config
prints the effective settings, or every problem with them. --check-store
reads the store (job records, steps, output) and says what is damaged,
without starting: scavd repairs and restores what it can when it starts.

SIGHUP reloads the config file: log_level and step_retention change live, a
change to any other key is logged and waits for a restart; a bad file keeps
the running settings.
SIGINT or SIGTERM stop it: running jobs get SIGTERM and their grace period
(they checkpoint when they can); with --resume-jobs (the default) the next
scavd on the same state directory resumes them from their checkpoints.
Run under systemd (Type=notify) it reports readiness, status and watchdog pings.`,
		Example:       "  scavd\n  scavd --config /etc/scavenger/scavd.yaml --check-config\n  scavd --check-store\n  scavd --state-dir /var/lib/scavenger --cloud-cleanup\n  scavd --listen 127.0.0.1:4233 --state-dir /var/lib/scavenger\n  scavd --nats nats://10.0.0.5:4222",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       api.Version,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l := newLoader(cmd.Flags(), config, cmd.Flags().Changed("config"))
			if checkConfig {
				return check(cmd.OutOrStdout(), l)
			}
			if checkStore {
				return checkStateStore(cmd.OutOrStdout(), l)
			}
			if cloudCleanup {
				return cleanupCloud(cmd.Context(), cmd.OutOrStdout(), l)
			}
			return serve(cmd.Context(), l)
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "config file (default "+DefaultConfigFile+" when it exists; \"\" for none)")
	f.BoolVar(&checkConfig, "check-config", false, "validate the settings, print the effective ones and exit: 0 valid, 1 not")
	f.BoolVar(&checkStore, "check-store", false, "read every record of the store under the state directory, say what is damaged and what scavd would repair or restore at its start, and exit (changes nothing): 0 well, 1 not")
	f.BoolVar(&cloudCleanup, "cloud-cleanup", false, "destroy the local clouds of this host that no scavd has open (this state directory's, and those left by a scavd or a test that stopped), with their instances, bridges, namespaces and cgroups, and exit")
	bindFlags(f, &flags)
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	return cmd.ExecuteContext(ctx)
}

// servePlugin serves one built-in launcher to a plugin host until it is done.
func servePlugin(name string) error {
	if name == "" {
		name = "local"
	}
	log := goplugin.NewPluginLogger(zapcore.InfoLevel)
	l, release, err := builtin.Open(context.Background(), name, builtin.Options{KillOnParentDeath: true}, log)
	if err != nil {
		return fmt.Errorf("serve launcher plugin: %w", err)
	}
	defer release()
	goplugin.Serve(l)
	return nil
}

// newLogger builds the daemon's logger; its level can change later.
func newLogger(level, format string) (*zap.Logger, zap.AtomicLevel, error) {
	lvl, err := zap.ParseAtomicLevel(level)
	if err != nil {
		return nil, lvl, fmt.Errorf("log_level %q: use debug, info, warn or error", level)
	}
	var enc zapcore.Encoder
	switch format {
	case "json":
		enc = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	case "console":
		enc = zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	default:
		return nil, lvl, fmt.Errorf("log_format %q: use console or json", format)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(os.Stderr), lvl)).Named("scavd"), lvl, nil
}
