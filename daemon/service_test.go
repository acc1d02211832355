package daemon

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testdir"
	"github.com/scavenger-ml/scavenger/plugins"
)

// TestRunNotifiesSystemd runs a real daemon with a real unixgram socket
// standing in for systemd's NOTIFY_SOCKET and reads what it is told: READY=1
// once the daemon serves, STATUS= lines that follow the running jobs,
// WATCHDOG=1 pings, and STOPPING=1 when it shuts down.
func TestRunNotifiesSystemd(t *testing.T) {
	dir := testdir.Short(t, "scavd-notify-")
	sock := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 1000)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	// next returns the first datagram that contains want, failing after 10s.
	next := func(want string) string {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case m := <-msgs:
				if strings.Contains(m, want) {
					return m
				}
			case <-timeout:
				t.Fatalf("no notification with %q", want)
			}
		}
	}

	state := filepath.Join(dir, "state")
	t.Setenv("NOTIFY_SOCKET", sock)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{StateDir: state, Listen: "127.0.0.1:0", Notify: true, Watchdog: 50 * time.Millisecond},
			zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	}()

	ready := next("READY=1")
	if !strings.Contains(ready, "STATUS=no jobs running") {
		t.Errorf("ready message %q has no status", ready)
	}
	// Ready means serving: the discovery file is written, the socket listens.
	info, err := api.ReadDiscovery(state)
	if err != nil {
		t.Fatalf("ready, but no discovery file: %v", err)
	}
	if c, err := net.Dial("unix", info.Socket); err != nil {
		t.Fatalf("ready, but the telemetry socket does not answer: %v", err)
	} else {
		c.Close()
	}
	c, err := api.Dial(ctx, info.API, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	next("WATCHDOG=1")
	j, err := c.Run(ctx, api.RunRequest{Command: []string{"/bin/sh", "-c", "sleep 60"}, Dir: dir, Config: plugins.Config{Workers: 1}, Grace: api.Duration(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	next("STATUS=1 job running: " + j.ID)
	if _, err := c.Stop(ctx, j.ID, 0); err != nil {
		t.Fatal(err)
	}
	next("STATUS=no jobs running")
	next("WATCHDOG=1")

	cancel()
	stopping := next("STOPPING=1")
	if !strings.Contains(stopping, "STATUS=stopping") {
		t.Errorf("stopping message %q has no status", stopping)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return")
	}
}

func TestDefaultStateDirIsSystemds(t *testing.T) {
	t.Setenv("STATE_DIRECTORY", "/var/lib/scavenger:/var/lib/other")
	if got := api.DefaultStateDir(); got != "/var/lib/scavenger" {
		t.Fatalf("DefaultStateDir() = %q with STATE_DIRECTORY set", got)
	}
}

// TestRunWithoutServiceManager: no NOTIFY_SOCKET, nothing to tell; Run
// serves and stops as before.
func TestRunWithoutServiceManager(t *testing.T) {
	state := testdir.Short(t, "scavd-plain-")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{StateDir: state, Listen: "127.0.0.1:0"}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	}()
	eventually(t, "the discovery file", 10*time.Second, func() bool {
		_, err := api.ReadDiscovery(state)
		return err == nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return")
	}
}

// TestNotifySendsOneDatagram: the assignments of one notification reach
// $NOTIFY_SOCKET (a path, or an abstract name after '@') as one datagram,
// a status of several lines as one line.
func TestNotifySendsOneDatagram(t *testing.T) {
	for kind, name := range map[string]string{"path": filepath.Join(t.TempDir(), "notify.sock"), "abstract": "@scavd-notify-test-" + filepath.Base(t.TempDir())} {
		t.Run(kind, func(t *testing.T) {
			addr := name
			if addr[0] == '@' {
				addr = "\x00" + addr[1:]
			}
			conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			t.Setenv("NOTIFY_SOCKET", name)
			notify(zaptest.NewLogger(t), "READY=1", statusLine("2 jobs running:\na, b"))
			buf := make([]byte, 4096)
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatalf("read notification: %v", err)
			}
			if got, want := string(buf[:n]), "READY=1\nSTATUS=2 jobs running: a, b"; got != want {
				t.Fatalf("datagram %q, want %q", got, want)
			}
		})
	}
}
