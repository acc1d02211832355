package goplugin

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"

	"github.com/scavenger-ml/scavenger/plugins"
	pb "github.com/scavenger-ml/scavenger/plugins/proto"
)

// PluginName is the name a launcher is dispensed under in a plugin binary.
const PluginName = "launcher"

// Handshake is shared by scavd and every launcher plugin binary. The magic
// cookie only stops a plugin binary from being run by hand; it is no
// security measure (Load checks the binary's checksum for that).
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "SCAVD_PLUGIN",
	MagicCookieValue: "launcher",
}

// GRPCPlugin is the go-plugin plugin of launchers, over gRPC only. In a
// plugin binary Impl is the launcher served; on the host Impl is nil and
// the dispensed value is a Launcher that calls the plugin.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the launcher to serve (plugin side).
	Impl plugins.Launcher
	// Logger is named per side; nil means zap.NewNop.
	Logger *zap.Logger
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

func (p *GRPCPlugin) logger() *zap.Logger {
	if p.Logger == nil {
		return zap.NewNop()
	}
	return p.Logger
}

// GRPCServer registers the launcher service for Impl.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return fmt.Errorf("serve launcher plugin: no launcher to serve")
	}
	pb.RegisterLauncherServer(s, newGRPCServer(p.Impl, p.logger().Named("server")))
	return nil
}

// GRPCClient returns a Launcher that calls the plugin over conn; ctx ends
// when the plugin exits.
func (p *GRPCPlugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return newGRPCLauncher(ctx, conn, p.logger())
}

// PluginSet is the go-plugin plugin map of a launcher: PluginName to a
// GRPCPlugin serving impl (nil on the host).
func PluginSet(impl plugins.Launcher, logger *zap.Logger) plugin.PluginSet {
	return plugin.PluginSet{PluginName: &GRPCPlugin{Impl: impl, Logger: logger}}
}

// Serve serves l as a launcher plugin over gRPC and returns when the host
// is done with the plugin. It is what the main of a plugin binary calls;
// run by hand, without the host's handshake, it prints a notice and exits 1
// (go-plugin's behaviour). The plugin logs through NewPluginLogger, which the
// host re-emits through its own zap logger.
func Serve(l plugins.Launcher) {
	logger := NewPluginLogger(zapcore.DebugLevel).Named(l.Name())
	defer func() { _ = logger.Sync() }()
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         PluginSet(l, logger),
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          newHCLogger(logger.Named("go-plugin")),
	})
}
