package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/scavenger-ml/scavenger/internal/secret"
)

// The state directory holds the daemon's secrets (nats.nk, telemetry.key),
// its store and its sockets. A directory someone else made and owns, or one
// under a directory others can write, could hold keys that user planted
// (then they act as the daemon on NATS, or forge any job's telemetry), or be
// swapped under the daemon; so the daemon refuses it and names the path:
// the directory must be its own user's and writable by no one else, every
// directory above it root's or its user's and writable by no one else
// unless sticky (/tmp), and each secret in it a file of its user's only.

// secretFiles are the secrets in a state directory, with what each lets
// a stranger do (internal/secret's wording).
var secretFiles = map[string]string{"nats.nk": "act as the daemon", "telemetry.key": "forge tokens"}

// makeStateDir makes the state directory: private, or for a root daemon
// that serves every user, traversable (its sockets, python client and
// checkpoint root are reached through it; nothing in it can be listed).
// One that exists is checked first (CheckStateDir): it is not adopted.
func makeStateDir(dir string, standalone bool) error {
	if err := CheckStateDir(dir); err != nil {
		return err
	}
	mode := os.FileMode(0o700)
	if os.Geteuid() == 0 && !standalone {
		mode = 0o711
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return fmt.Errorf("create state directory %s: %w", dir, err)
	}
	if err := CheckStateDir(dir); err != nil { // made by someone else meanwhile
		return err
	}
	if err := os.Chmod(dir, mode); err != nil {
		return fmt.Errorf("set the mode of state directory %s: %w", dir, err)
	}
	return nil
}

// CheckStateDir says what makes dir unfit to be this process's state
// directory (nil when nothing does, or when it does not exist yet and the
// directories above it are fit): every problem, each naming its path and
// the fix.
func CheckStateDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	var errs []error
	st, err := os.Lstat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		errs = append(errs, fmt.Errorf("state directory %s: %w", abs, err))
	case st.Mode()&fs.ModeSymlink != 0:
		errs = append(errs, fmt.Errorf("state directory %s is a symlink: set state_dir to the directory itself", abs))
	case !st.IsDir():
		errs = append(errs, fmt.Errorf("state directory %s is not a directory", abs))
	default:
		errs = append(errs, checkOwned("state directory", abs, st, false)...)
		for name, risk := range secretFiles {
			p := filepath.Join(abs, name)
			if fst, err := os.Lstat(p); err == nil {
				if err := secret.Check(p, name, risk, fst); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil {
			errs = append(errs, checkOwned("directory above the state directory", p, st, true)...)
		}
		if p == filepath.Dir(p) {
			break
		}
	}
	return errors.Join(errs...)
}

// checkOwned checks that st (of path) is this process's user's (or, for
// a directory above, root's) and writable by no one else (or sticky, for a
// directory above).
func checkOwned(what, path string, st fs.FileInfo, above bool) []error {
	var errs []error
	me := os.Geteuid()
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != me && !(above && sys.Uid == 0) {
		errs = append(errs, fmt.Errorf("%s %s is owned by uid %d, not by scavd's user (uid %d): its owner could plant scavd's keys or swap its files; remove it and let scavd make it, or chown it to uid %d",
			what, path, sys.Uid, me, me))
	}
	writable := st.Mode().Perm()&0o022 != 0
	if above { // a group of the daemon's own (a user's private group) may write above it; anyone may, with the sticky bit
		sys, _ := st.Sys().(*syscall.Stat_t)
		writable = st.Mode()&fs.ModeSticky == 0 && (st.Mode().Perm()&0o002 != 0 || st.Mode().Perm()&0o020 != 0 && sys != nil && int(sys.Gid) != os.Getegid() && sys.Gid != 0)
	}
	if writable {
		errs = append(errs, fmt.Errorf("%s %s (mode %s) is writable by others: they could swap scavd's files; chmod go-w it", what, path, st.Mode().Perm()))
	}
	return errs
}

// CheckFiles says what makes the files cfg names unfit for a daemon of this
// process's user (scavd --check-config): the state directory and the
// directories above it (CheckStateDir), and each secret file cfg names that
// exists (the NATS key, the API tokens).
func CheckFiles(cfg Config) error {
	errs := []error{CheckStateDir(cfg.StateDir)}
	for _, f := range []struct{ path, what, risk string }{
		{cfg.NATSKey, "nats key", "act as the daemon"},
		{cfg.APITokens, "api tokens", "read the secrets"},
	} {
		if f.path == "" {
			continue
		}
		if st, err := os.Lstat(f.path); err == nil {
			errs = append(errs, secret.Check(f.path, f.what, f.risk, st))
		} else if !errors.Is(err, fs.ErrNotExist) || f.what != "nats key" {
			errs = append(errs, fmt.Errorf("%s %s: %w", f.what, f.path, err))
		}
	}
	return errors.Join(errs...)
}
