package unixsock

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/internal/testdir"
)

// TestListen: a socket in a new directory, with its mode; a stale socket
// file is replaced; one another listener serves is refused and left alone;
// a path too long is refused with its fix.
func TestListen(t *testing.T) {
	dir := testdir.Short(t, "usock")
	path := filepath.Join(dir, "sub", "a.sock")
	for _, shared := range []bool{false, true} {
		ln, err := Listen(path, "test socket", "", shared)
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o600)
		if shared {
			want = 0o666
		}
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
			t.Errorf("shared %v: mode %v (%v), want %v", shared, st.Mode().Perm(), err, want)
		}
		if _, err := Listen(path, "test socket", "", false); err == nil || !strings.Contains(err.Error(), "listen on test socket "+path+": another daemon is serving it") {
			t.Errorf("a second listener: %v", err)
		}
		if c, err := net.Dial("unix", path); err != nil {
			t.Errorf("the first listener after the second was refused: %v", err)
		} else {
			c.Close()
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close() // a dead daemon's socket file stays
	}
	ln, err := Listen(path, "test socket", "", false)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	ln.Close()
	if _, err := Listen("/"+strings.Repeat("s", MaxPath), "test socket", "choose a shorter one", false); err == nil ||
		!strings.Contains(err.Error(), "is 108 bytes, unix sockets allow 107; choose a shorter one") {
		t.Errorf("a path too long: %v", err)
	}
}
