package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrStateInUse is returned when another daemon holds the state directory.
var ErrStateInUse = errors.New("state directory in use by another scavd")

// lockState takes the state directory's exclusive lock, so that two daemons
// never share one JetStream store. The lock lasts until the file is closed
// (or the process ends).
func lockState(dir string) (*os.File, error) {
	path := filepath.Join(dir, "scavd.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := strings.TrimSpace(string(b))
			if _, perr := strconv.Atoi(holder); perr != nil {
				holder = "unknown"
			}
			return nil, fmt.Errorf("%w: %s (pid %s); scavctl uses that daemon, or give another --state-dir", ErrStateInUse, dir, holder)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
