package ssh

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/internal/subreaper"
	"github.com/scavenger-ml/scavenger/internal/testnet"
	"go.uber.org/zap"
	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

const sshdPath = "/usr/sbin/sshd"

// testSSHD is a real sshd listening on 127.0.0.1 and 127.0.0.2.
type testSSHD struct {
	dir        string
	port       int
	keyFile    string
	knownHosts string
	hostKey    gossh.PublicKey
}

// startSSHD starts sshd for the test (skipping when it cannot) and stops it
// by PID, reaping it, when the test ends.
func startSSHD(t *testing.T) *testSSHD {
	t.Helper()
	if _, err := os.Stat(sshdPath); err != nil {
		t.Skipf("SKIP: %s is absent (apt-get install -y openssh-server): %v", sshdPath, err)
	}
	if os.Geteuid() != 0 {
		t.Skipf("SKIP: sshd tests need root (uid %d)", os.Geteuid())
	}
	dir := t.TempDir()
	s := &testSSHD{dir: dir, keyFile: filepath.Join(dir, "id_ed25519"), knownHosts: filepath.Join(dir, "known_hosts")}
	hostPub := testnet.WriteKey(t, filepath.Join(dir, "hostkey"))
	clientPub := testnet.WriteKey(t, s.keyFile)
	s.hostKey = hostPub
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), gossh.MarshalAuthorizedKey(clientPub), 0o644); err != nil {
		t.Fatal(err)
	}
	// Become the subreaper of what sshd orphans (session processes, worker
	// descendants), so that the cleanup reaps them instead of leaving
	// zombies to a PID 1 that may not reap.
	if err := subreaper.Become(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	s.port = freeLoopbackPort(t)
	cfg := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
ListenAddress 127.0.0.2
HostKey %[2]s/hostkey
PidFile %[2]s/sshd.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AuthorizedKeysFile %[2]s/authorized_keys
StrictModes no
AcceptEnv SCAV_*
# bash sources ~/.bashrc for commands run by sshd unless SHLVL says it is
# not a top-level shell: keep this machine's login files out of the tests.
SetEnv SHLVL=1
MaxStartups 100:30:200
MaxSessions 50
`, s.port, dir)
	cfgFile := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	line := knownhosts.Line([]string{hostAddr("127.0.0.1", s.port), hostAddr("127.0.0.2", s.port)}, hostPub)
	if err := os.WriteFile(s.knownHosts, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	var logMu sync.Mutex
	cmd := exec.Command(sshdPath, "-D", "-e", "-f", cfgFile)
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { logMu.Lock(); defer logMu.Unlock(); return log.Write(p) })
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sshd: %v", err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		_ = cmd.Wait() // reap it
		if t.Failed() {
			logMu.Lock()
			t.Logf("sshd log:\n%s", log.String())
			logMu.Unlock()
		}
		checkNothingLeft(t, pid)
	})
	for _, a := range []string{"127.0.0.1", "127.0.0.2"} {
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(a, strconv.Itoa(s.port)), time.Second)
			if err == nil {
				_ = c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sshd does not listen on %s:%d: %v", a, s.port, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return s
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func hostAddr(a string, port int) string { return net.JoinHostPort(a, strconv.Itoa(port)) }

// freeLoopbackPort returns a port free on both 127.0.0.1 and 127.0.0.2.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln2, err := net.Listen("tcp", hostAddr("127.0.0.2", port))
		_ = ln.Close()
		if err == nil {
			_ = ln2.Close()
			return port
		}
	}
	t.Fatal("no port free on both loopback addresses")
	return 0
}

// checkNothingLeft polls until sshd (pid) and every worker started by the
// tests (a process whose environment has SCAV_JOB_ID=Test...) are gone,
// zombies of others aside, and no child of the test process remains,
// reaping the orphans the test inherited as their subreaper.
func checkNothingLeft(t *testing.T, sshdPID int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		subreaper.ReapOrphans()
		left := leftovers(sshdPID)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes left behind: %v", left)
			for _, p := range left {
				if pid, err := strconv.Atoi(strings.Fields(p)[0]); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leftovers lists sshd, the tests' workers and the live children or
// unreaped zombies of the test process.
func leftovers(sshdPID int) []string {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var left []string
	me := strconv.Itoa(os.Getpid())
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || (f[0] == "Z" && f[1] != me) {
			continue
		}
		pid := strings.Fields(s)[0]
		env, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "environ"))
		switch {
		case pid == strconv.Itoa(sshdPID), f[1] == me, bytes.Contains(env, []byte("\x00SCAV_JOB_ID=Test")), bytes.HasPrefix(env, []byte("SCAV_JOB_ID=Test")):
			left = append(left, pid+" "+s[strings.IndexByte(s, '('):i+1])
		}
	}
	return left
}

// newTestLauncher returns a launcher for the test's sshd over hosts.
func (s *testSSHD) newLauncher(t *testing.T, hosts []Host, mod func(*Options)) *Launcher {
	t.Helper()
	opts := Options{
		Logger:            zap.NewNop(),
		Hosts:             hosts,
		KeyFiles:          []string{s.keyFile},
		KnownHosts:        []string{s.knownHosts},
		Grace:             500 * time.Millisecond,
		KeepaliveInterval: 300 * time.Millisecond,
		KeepaliveTimeout:  time.Second,
		// Both "hosts" are this machine: the daemon's socket is reachable
		// as it is (the tests of forwarding turn it on).
		NoTelemetryForward: true,
	}
	if mod != nil {
		mod(&opts)
	}
	l, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func (s *testSSHD) hosts(slots1, slots2 int) []Host {
	return []Host{
		{Addr: "127.0.0.1", Port: s.port, User: "root", Slots: slots1},
		{Addr: "127.0.0.2", Port: s.port, User: "root", Slots: slots2},
	}
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
