// Package userfs acts on the files of a directory a user controls (a job's
// checkpoint directory, the spool in it) as that user, and never through a
// link the user planted: a root daemon that reads, renames or removes a
// worker's files does it with the worker's identity, so that it can do no
// more there than the user could, and a symlink, a FIFO or a huge file put
// in its way is refused instead of followed, waited on or read whole.
//
// # How a call takes the user's identity
//
// As runs a function on an OS thread of its own whose file-system identity
// is the user's: setgroups, setfsgid and setfsuid, made as raw system calls,
// which on Linux change the calling thread only (Go's syscall.Setuid and
// friends would change every thread of the process; x/sys/unix's Setfsuid,
// Setfsgid and Setgroups are the raw, per-thread calls). The goroutine
// locks its thread (runtime.LockOSThread) and never unlocks it, so the
// thread ends with the goroutine and no other goroutine ever runs on it; the
// Go runtime starts no thread from a locked one (it asks its template thread
// instead), so the identity spreads nowhere. Moving fsuid from 0 to the
// user's drops the thread's file capabilities (CAP_DAC_OVERRIDE,
// CAP_DAC_READ_SEARCH, CAP_FOWNER, ...): every permission check on that
// thread is the user's, with the user's groups, and only those checks
// change. The real and effective ids stay the daemon's, so the user cannot
// signal or trace the thread meanwhile (a thread with the user's real uid
// could be sent SIGKILL by them, which would end the whole daemon).
//
// The alternative, a helper process started as the user for each call, was
// not chosen: it costs a fork and exec per call (a spool drain at every
// job's end), and the records it read would have to be copied back to the
// daemon through a pipe. A thread costs microseconds and streams what it
// reads straight to the caller.
//
// # How a path is opened
//
// OpenDir opens the directory a job names (an absolute path the user
// chose) with O_NOFOLLOW|O_DIRECTORY, as the identity in force: a symlink in
// its last component is refused; one in an earlier component is followed
// with the user's rights only, so it leads nowhere the user could not go.
// Everything else is opened relative to a Dir's file descriptor, one name
// at a time (no '/', no "..", openat2's RESOLVE_BENEATH and
// RESOLVE_NO_SYMLINKS where the kernel has them, O_NOFOLLOW where not);
// Open takes regular files only (fstatat first, then O_NONBLOCK, so that a
// FIFO cannot block the open, and fstat again on the descriptor) no larger
// than the caller's bound, and the reader it returns stops at that bound
// should the file grow.
package userfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Errors of the checks on what a user left in a directory.
var (
	// ErrNotRegular is a name that is a symlink, FIFO, socket, device or
	// directory where a regular file was expected.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge is a file larger than the caller's bound.
	ErrTooLarge = errors.New("file too large")
	// ErrBadName is a name that is not one path component.
	ErrBadName = errors.New("not a single file name")
)

// ID is the identity a call takes: a user, their primary group and their
// supplementary groups.
type ID struct {
	UID, GID uint32
	Groups   []uint32
}

// As runs fn with the file-system identity of id on an OS thread of its
// own (see the package comment) and returns fn's error. With id nil, fn runs
// as the process itself, on the caller's goroutine. Everything fn does with
// this package must happen inside fn: a Dir's calls check the rights of the
// thread that makes them.
func As(id *ID, fn func() error) error {
	if id == nil {
		return fn()
	}
	var err error
	OnDiscardedThread(func() {
		if err = become(id); err == nil {
			err = fn()
		}
	})
	return err
}

// OnDiscardedThread runs fn on an OS thread that nothing else runs on and
// that ends after fn, and waits for fn: a thread whose credentials fn may
// change. The goroutine locks its thread and never unlocks it, so the
// runtime ends the thread with it; the process's main thread, which the
// runtime keeps instead of ending, is held (locked, waiting) while fn runs
// on another.
func OnDiscardedThread(fn func()) {
	done := make(chan struct{})
	var run func()
	run = func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if unix.Gettid() == unix.Getpid() {
			inner := make(chan struct{})
			go func() { // not on this thread: it is locked to this goroutine
				run()
				close(inner)
			}()
			<-inner
			runtime.UnlockOSThread() // the main thread goes back, untouched
			return
		}
		defer close(done)
		fn()
	}
	go run()
	<-done
}

// become gives the calling thread id's file-system identity and checks
// that it took (setfsuid reports no failure of its own).
func become(id *ID) error {
	groups := make([]int, len(id.Groups))
	for i, g := range id.Groups {
		groups[i] = int(g)
	}
	if err := unix.Setgroups(groups); err != nil {
		return fmt.Errorf("act as uid %d: set groups: %w", id.UID, err)
	}
	_, _ = unix.SetfsgidRetGid(int(id.GID))
	_, _ = unix.SetfsuidRetUid(int(id.UID))
	gid, _ := unix.SetfsgidRetGid(-1)
	uid, _ := unix.SetfsuidRetUid(-1)
	if uint32(uid) != id.UID || uint32(gid) != id.GID {
		return fmt.Errorf("act as uid %d gid %d: the thread's file-system identity is uid %d gid %d (only root can act as another user)", id.UID, id.GID, uid, gid)
	}
	return nil
}

// Dir is an open directory; its calls act on names in it.
type Dir struct {
	fd   int
	path string
}

// OpenDir opens the directory path, refusing a symlink at its end.
func OpenDir(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open directory", Path: path, Err: err}
	}
	return &Dir{fd: fd, path: path}, nil
}

// Path is the directory's path, for messages.
func (d *Dir) Path() string { return d.path }

// Close closes the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Owner is the uid that owns the directory.
func (d *Dir) Owner() (uint32, error) {
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return 0, &os.PathError{Op: "stat", Path: d.path, Err: err}
	}
	return st.Uid, nil
}

// check refuses a name that is not one path component.
func (d *Dir) check(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return &os.PathError{Op: "open", Path: d.path + "/" + name, Err: ErrBadName}
	}
	return nil
}

// openAt opens name in d with flags, following no symlink anywhere.
func (d *Dir) openAt(name string, flags int) (int, error) {
	fd, err := unix.Openat2(d.fd, name, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) { // before Linux 5.6
		fd, err = unix.Openat(d.fd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	return fd, err
}

// Sub opens the directory name in d.
func (d *Dir) Sub(name string) (*Dir, error) {
	if err := d.check(name); err != nil {
		return nil, err
	}
	p := d.path + "/" + name
	fd, err := d.openAt(name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, &os.PathError{Op: "open directory", Path: p, Err: err}
	}
	return &Dir{fd: fd, path: p}, nil
}

// Names lists the names in the directory.
func (d *Dir) Names() ([]string, error) {
	fd, err := unix.Dup(d.fd) // the os.File owns (and closes) its copy
	if err != nil {
		return nil, &os.PathError{Op: "read directory", Path: d.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}

// Lstat describes name in d without following it.
func (d *Dir) Lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := d.check(name); err != nil {
		return st, err
	}
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, &os.PathError{Op: "stat", Path: d.path + "/" + name, Err: err}
	}
	return st, nil
}

// Regular reports whether a stat is a regular file's.
func Regular(st unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFREG }

// IsDir reports whether a stat is a directory's.
func IsDir(st unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFDIR }

// File is a regular file opened for reading, of Size bytes when opened;
// reads stop at the bound it was opened with.
type File struct {
	f    *os.File
	r    io.Reader
	Size int64
}

// Read reads from the file, up to its bound.
func (f *File) Read(p []byte) (int, error) { return f.r.Read(p) }

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// Open opens the regular file name in d for reading, when it holds at
// most max bytes; a symlink, FIFO, device, socket or directory is
// ErrNotRegular, a larger file ErrTooLarge. Nothing is read yet.
func (d *Dir) Open(name string, max int64) (*File, error) {
	st, err := d.Lstat(name)
	if err != nil {
		return nil, err
	}
	p := d.path + "/" + name
	if err := fits(p, st, max); err != nil {
		return nil, err
	}
	fd, err := d.openAt(name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if err := fits(p, st, max); err != nil { // swapped since the first look
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	return &File{f: f, r: io.LimitReader(f, max), Size: st.Size}, nil
}

// fits checks that st is a regular file of at most max bytes.
func fits(path string, st unix.Stat_t, max int64) error {
	if !Regular(st) {
		return &os.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	if st.Size > max {
		return &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, st.Size, max)}
	}
	return nil
}

// Remove removes the file (not directory) name from d.
func (d *Dir) Remove(name string) error {
	if err := d.check(name); err != nil {
		return err
	}
	if err := unix.Unlinkat(d.fd, name, 0); err != nil {
		return &os.PathError{Op: "remove", Path: d.path + "/" + name, Err: err}
	}
	return nil
}

// RemoveDir removes the directory name from d when it is empty.
func (d *Dir) RemoveDir(name string) error {
	if err := d.check(name); err != nil {
		return err
	}
	if err := unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR); err != nil {
		return &os.PathError{Op: "remove directory", Path: d.path + "/" + name, Err: err}
	}
	return nil
}

// Rename renames from to to, both in d, unless to exists.
func (d *Dir) Rename(from, to string) error {
	if err := errors.Join(d.check(from), d.check(to)); err != nil {
		return err
	}
	if err := unix.Renameat2(d.fd, from, d.fd, to, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "rename", Old: d.path + "/" + from, New: d.path + "/" + to, Err: err}
	}
	return nil
}

// LookPath finds the executable file in the directories of path (a PATH
// value) as id would: each directory searched and the file checked with
// id's rights (faccessat with AT_EACCESS, on a thread of id's identity), so
// that a directory the daemon can read and id cannot is passed over, not
// chosen. Directories that are not absolute are passed over, as os/exec
// does.
func LookPath(id *ID, file, path string) (string, error) {
	found := ""
	err := As(id, func() error {
		for _, dir := range filepath.SplitList(path) {
			if !filepath.IsAbs(dir) {
				continue
			}
			p := filepath.Join(dir, file)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && executable(id, p, st) {
				found = p
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if found == "" {
		return "", fmt.Errorf("%s: no executable file of that name in PATH %s", file, path)
	}
	return found, nil
}

// executable reports whether the thread's identity (id's) may execute the
// file at p: faccessat2 with AT_EACCESS checks the thread's file-system
// identity; before Linux 5.8, the mode bits are read for id.
func executable(id *ID, p string, st os.FileInfo) bool {
	err := unix.Faccessat2(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS)
	if !errors.Is(err, unix.ENOSYS) {
		return err == nil
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if id == nil || !ok {
		return st.Mode().Perm()&0o111 != 0
	}
	switch {
	case sys.Uid == id.UID:
		return st.Mode().Perm()&0o100 != 0
	case sys.Gid == id.GID || slices.Contains(id.Groups, sys.Gid):
		return st.Mode().Perm()&0o010 != 0
	}
	return st.Mode().Perm()&0o001 != 0
}
