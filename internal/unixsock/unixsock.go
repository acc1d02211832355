// Package unixsock opens a daemon's unix socket: one daemon serves a
// socket, a stale one left by a dead daemon is replaced, and the socket's
// mode says who may connect.
package unixsock

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// MaxPath is the longest path a unix socket may have (sun_path holds 108
// bytes with the NUL).
const MaxPath = 107

// Listen listens on the unix socket at path, making its directory (0711)
// when missing. The socket is mode 0600, only this user's processes may
// connect, or 0666 when shared (who calls is then the kernel's word, or a
// token's, not the file's mode). what names the socket in errors ("api
// socket"); fix says what to change when the path is too long.
func Listen(path, what, fix string, shared bool) (net.Listener, error) {
	if len(path) > MaxPath {
		return nil, fmt.Errorf("listen on %s %s: path is %d bytes, unix sockets allow %d; %s", what, path, len(path), MaxPath, fix)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return nil, fmt.Errorf("create socket directory for %s: %w", path, err)
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("listen on %s %s: another daemon is serving it", what, path)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s %s: %w", what, path, err)
	}
	mode := os.FileMode(0o600)
	if shared {
		mode = 0o666
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("set the mode of %s %s: %w", what, path, err)
	}
	return ln, nil
}
