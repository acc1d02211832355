package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// listen opens a real unixgram socket, as systemd does for NOTIFY_SOCKET.
func listen(t *testing.T) (string, *net.UnixConn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return path, conn
}

func receive(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("read notification: %v", err)
	}
	return string(buf[:n])
}

func TestNotifySendsOneDatagram(t *testing.T) {
	path, conn := listen(t)
	n := New(path)
	if err := n.Notify(Ready, Status("2 jobs running")); err != nil {
		t.Fatal(err)
	}
	if got, want := receive(t, conn), "READY=1\nSTATUS=2 jobs running\n"; got != want {
		t.Fatalf("datagram %q, want %q", got, want)
	}
	if err := n.Notify(Reloading()...); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, conn); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Fatalf("datagram %q", got)
	}
}

func TestNotifyRejectsMalformedAssignments(t *testing.T) {
	path, _ := listen(t)
	for _, a := range []string{"READY", "STATUS=a\nREADY=1"} {
		if err := New(path).Notify(a); err == nil {
			t.Errorf("Notify(%q) was accepted", a)
		}
	}
}

func TestDisabledNotifierIsANoOp(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n := FromEnv()
	if n.Enabled() {
		t.Fatal("enabled without NOTIFY_SOCKET")
	}
	if err := n.Notify(Ready); err != nil {
		t.Fatal(err)
	}
}

func TestAbstractSocket(t *testing.T) {
	name := "@scavd-sdnotify-test-" + filepath.Base(t.TempDir())
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: "\x00" + name[1:], Net: "unixgram"})
	if err != nil {
		t.Skipf("abstract sockets: %v", err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", name)
	if err := FromEnv().Notify(Stopping); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, conn); got != "STOPPING=1\n" {
		t.Fatalf("datagram %q", got)
	}
}

func TestWatchdogInterval(t *testing.T) {
	pid := os.Getpid()
	for _, tc := range []struct {
		name, usec, pid string
		want            time.Duration
		err             bool
	}{
		{name: "unset"},
		{name: "half the timeout", usec: "10000000", want: 5 * time.Second},
		{name: "for this process", usec: "2000000", pid: strconv.Itoa(pid), want: time.Second},
		{name: "for another process", usec: "2000000", pid: strconv.Itoa(pid + 1)},
		{name: "zero", usec: "0", err: true},
		{name: "garbage", usec: "10s", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("WATCHDOG_USEC", tc.usec)
			t.Setenv("WATCHDOG_PID", tc.pid)
			got, err := WatchdogInterval()
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("WatchdogInterval() = %v, %v; want %v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}
