// Package testuser makes unprivileged users for tests and removes them
// after the test (useradd, userdel: the tests run as root), and acts as one:
// a command under setpriv, or a function on an OS thread of the test
// process whose credentials are the user's (raw per-thread setgroups,
// setresgid, setresuid), for what must be done by the user in person: a
// connection whose peer credentials are theirs, a symlink or a FIFO they
// plant.
package testuser

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/internal/testdir"
	"github.com/scavenger-ml/scavenger/internal/userfs"
)

// User is an unprivileged user made for a test.
type User struct {
	Name     string
	UID, GID int
}

// Root is root, for the helpers that run a command as a user.
var Root = User{Name: "root"}

// RequireRoot skips a test that needs root (useradd, setpriv).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the test makes users and acts as them: it runs as root")
	}
}

// Add makes a system user (no home, no login shell, its own group) named
// after tag, removed at the end of the test.
func Add(t testing.TB, tag string) User {
	t.Helper()
	RequireRoot(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := "scv" + tag + hex.EncodeToString(b)
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Skipf("SKIP: useradd %s: %v %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v %s", name, err, out)
		}
	})
	id := func(flag string) int {
		out, err := exec.Command("id", flag, name).Output()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		return n
	}
	return User{Name: name, UID: id("-u"), GID: id("-g")}
}

// Command is argv run as u (setpriv: uid, gid, groups), in dir, with a
// plain environment (PATH, HOME=dir) plus env.
func (u User) Command(dir string, env []string, argv ...string) *exec.Cmd {
	args := append([]string{"--reuid=" + u.Name, "--regid=" + u.Name, "--init-groups", "--"}, argv...)
	cmd := exec.Command("setpriv", args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir}, env...)
	return cmd
}

// Run runs argv as u (see Command) and returns what it printed and its
// exit status.
func (u User) Run(t testing.TB, dir string, env []string, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := u.Command(dir, env, argv...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	_ = cmd.Run()
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// Do runs fn as u on an OS thread of its own, and waits for it: the
// thread's credentials (real, effective and saved uid and gid, and the
// groups) become u's through raw system calls, which on Linux change only
// the calling thread, and the thread, locked to fn's goroutine and never
// unlocked, ends with it. A file fn makes is u's; a unix socket it connects
// carries u's peer credentials; the file descriptors it opens stay open
// after it returns.
func (u User) Do(t testing.TB, fn func()) {
	t.Helper()
	var err error
	tid := 0
	userfs.OnDiscardedThread(func() {
		tid = unix.Gettid()
		g, id := uintptr(u.GID), uintptr(u.UID)
		for _, c := range [][4]uintptr{
			{unix.SYS_SETGROUPS, 0, 0, 0},
			{unix.SYS_SETRESGID, g, g, g},
			{unix.SYS_SETRESUID, id, id, id},
		} {
			if _, _, e := unix.RawSyscall(c[0], c[1], c[2], c[3]); e != 0 {
				err = e
				return
			}
		}
		fn()
	})
	// The thread ends after fn: wait for it, so that no thread of u's is
	// left when the test removes u.
	task := fmt.Sprintf("/proc/self/task/%d", tid)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
	}
	if err != nil {
		t.Fatalf("act as %s: %v", u.Name, err)
	}
}

// SharedDir is a directory every user can enter and write (mode 1777,
// short path: unix sockets fit in it), removed after the test.
func SharedDir(t testing.TB) string {
	t.Helper()
	d := testdir.Short(t, "scavsec-")
	if err := os.Chmod(d, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return d
}
