// Package secret reads and makes the daemon's secret files (the NATS key,
// the telemetry key, the API's token file): a secret is trusted only when
// it is a regular file, reached without a symlink at its end, owned by the
// daemon's own user and readable by no one else. A key another user owns
// or could read is one they may have planted or copied, so it is refused,
// with the path and the fix, before it is used.
package secret

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxSecret bounds a secret file's size (a key is a few dozen bytes, a
// token file a few lines a user).
const maxSecret = 1 << 20

// Read reads the secret file path; what names it in errors ("nats key")
// and risk says what a stranger could do with it ("act as the daemon").
// When the file does not exist and make is set, make's bytes are written
// there first (mode 0600, never through a symlink or over a file that
// appeared meanwhile).
func Read(path, what, risk string, make func() ([]byte, error)) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) && make != nil {
		return create(path, what, make)
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%s %s: is a symlink; a secret is read only from a file of scavd's user's own", what, path)
		}
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	if err := Check(path, what, risk, st); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecret+1))
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", what, path, err)
	}
	if len(b) > maxSecret {
		return nil, fmt.Errorf("%s %s: more than %d bytes: not a secret of scavd's", what, path, maxSecret)
	}
	return b, nil
}

// Check says what makes the file st describes (at path) unfit to hold a
// secret: not a regular file, not the daemon's user's, or readable by others.
func Check(path, what, risk string, st fs.FileInfo) error {
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s %s: not a regular file (%s)", what, path, st.Mode().Type())
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("%s %s: owned by uid %d, not by scavd's user (uid %d): whoever owns it may have planted it to %s; remove it (scavd makes a new one) or chown it after checking it",
			what, path, sys.Uid, os.Geteuid(), risk)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s %s: mode %s lets others %s; chmod 600 it", what, path, st.Mode().Perm(), risk)
	}
	return nil
}

// create writes a new secret made by make at path.
func create(path, what string, make func() ([]byte, error)) ([]byte, error) {
	b, err := make()
	if err != nil {
		return nil, fmt.Errorf("make %s: %w", what, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("write %s %s: %w", what, path, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("write %s %s: %w", what, path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("write %s %s: %w", what, path, err)
	}
	return b, nil
}
