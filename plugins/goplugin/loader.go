package goplugin

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
)

// Load starts the launcher plugin binary at path, after checking that its
// sha256 is checksum, and returns the launcher it serves and a function that
// closes the connection and ends the plugin process (call it exactly once,
// after the launcher's last use). ctx bounds the start. A wrong checksum is
// ErrPluginChecksum and the binary is not run. The plugin's log lines and
// go-plugin's own go to log, named "plugin".
func Load(ctx context.Context, path string, checksum []byte, log *zap.Logger) (plugins.Launcher, func(), error) {
	fail := func(err error) (plugins.Launcher, func(), error) {
		return nil, nil, fmt.Errorf("load launcher plugin %s: %w", path, err)
	}
	if len(checksum) != sha256.Size {
		return fail(fmt.Errorf("%w: want a sha256 checksum of %d bytes, got %d bytes", plugins.ErrPluginChecksum, sha256.Size, len(checksum)))
	}
	logger := log.Named("plugin")
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          PluginSet(nil, logger.Named("client")),
		Cmd:              exec.Command(path),
		SecureConfig:     &plugin.SecureConfig{Checksum: checksum, Hash: sha256.New()},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           newHCLogger(logger),
	})
	stop := context.AfterFunc(ctx, client.Kill)
	defer stop()
	conn, err := client.Client()
	if err != nil {
		client.Kill()
		if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
			return fail(fmt.Errorf("%w: sha256 is %s, want %x", plugins.ErrPluginChecksum, fileSHA256(path), checksum))
		}
		if ctx.Err() != nil {
			return fail(fmt.Errorf("%w (%w)", ctx.Err(), err))
		}
		return fail(err)
	}
	raw, err := conn.Dispense(PluginName)
	if err != nil {
		client.Kill()
		return fail(fmt.Errorf("dispense %q: %w", PluginName, err))
	}
	l, ok := raw.(*grpcLauncher)
	if !ok {
		client.Kill()
		return fail(fmt.Errorf("dispense %q: got %T, not a launcher", PluginName, raw))
	}
	closeFn := func() {
		l.close()
		client.Kill()
	}
	return l, closeFn, nil
}

// fileSHA256 returns the hex sha256 of the file at path, or why it has none.
func fileSHA256(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}
