// Package sdnotify speaks systemd's service notification protocol
// (sd_notify(3)): a service started with Type=notify tells the service
// manager that it is ready, reloading or stopping, sends a free-form status
// line, and pings the watchdog, each as one datagram of newline-separated
// KEY=VALUE assignments on the unix socket named by $NOTIFY_SOCKET.
//
// The protocol is small enough to implement here rather than depend on a
// library: a path (or an abstract name starting with '@'), one unixgram
// datagram per message, no reply.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Messages a service sends (sd_notify(3)).
const (
	// Ready says start-up is finished and the service serves.
	Ready = "READY=1"
	// Stopping says the service is beginning its shutdown.
	Stopping = "STOPPING=1"
	// Watchdog is the keep-alive ping for WatchdogSec=.
	Watchdog = "WATCHDOG=1"
)

// Notifier sends notifications to the service manager. The zero value and a
// nil *Notifier are valid and send nothing, for a process not started by
// systemd.
type Notifier struct {
	addr *net.UnixAddr
}

// FromEnv returns a Notifier for $NOTIFY_SOCKET, or nil when it is unset.
func FromEnv() *Notifier {
	return New(os.Getenv("NOTIFY_SOCKET"))
}

// New returns a Notifier that sends to the socket at path ('@' for an
// abstract one), or nil for an empty path.
func New(path string) *Notifier {
	if path == "" {
		return nil
	}
	name := path
	if name[0] == '@' {
		name = "\x00" + name[1:]
	}
	return &Notifier{addr: &net.UnixAddr{Name: name, Net: "unixgram"}}
}

// Enabled reports whether notifications go anywhere.
func (n *Notifier) Enabled() bool { return n != nil && n.addr != nil }

// Notify sends one message made of the given KEY=VALUE assignments. It does
// nothing, successfully, when the Notifier is disabled.
func (n *Notifier) Notify(assignments ...string) error {
	if !n.Enabled() || len(assignments) == 0 {
		return nil
	}
	for _, a := range assignments {
		if !strings.Contains(a, "=") || strings.Contains(a, "\n") {
			return fmt.Errorf("sd_notify %q: want one KEY=VALUE line", a)
		}
	}
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify: dial %s: %w", n.addr.Name, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(assignments, "\n") + "\n")); err != nil {
		return fmt.Errorf("sd_notify: send to %s: %w", n.addr.Name, err)
	}
	return nil
}

// Status is the STATUS= assignment carrying a one-line description.
func Status(s string) string {
	return "STATUS=" + strings.ReplaceAll(s, "\n", " ")
}

// Reloading is the RELOADING=1 message, with the CLOCK_MONOTONIC time that
// systemd 253 and later ask for; Ready ends the reload.
func Reloading() []string {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	usec := ts.Nano() / int64(time.Microsecond)
	return []string{"RELOADING=1", "MONOTONIC_USEC=" + strconv.FormatInt(usec, 10)}
}

// WatchdogInterval reads $WATCHDOG_USEC (and $WATCHDOG_PID, which must be
// this process when set) and returns how often to ping: half the timeout, as
// sd_watchdog_enabled(3) advises. It returns 0 when no watchdog is asked for.
func WatchdogInterval() (time.Duration, error) {
	s := os.Getenv("WATCHDOG_USEC")
	if s == "" {
		return 0, nil
	}
	usec, err := strconv.ParseUint(s, 10, 63)
	if err != nil || usec == 0 {
		return 0, fmt.Errorf("WATCHDOG_USEC=%q: want a positive number of microseconds", s)
	}
	if p := os.Getenv("WATCHDOG_PID"); p != "" {
		pid, err := strconv.Atoi(p)
		if err != nil {
			return 0, fmt.Errorf("WATCHDOG_PID=%q: %w", p, err)
		}
		if pid != os.Getpid() {
			return 0, nil // the watchdog is another process's
		}
	}
	return time.Duration(usec) * time.Microsecond / 2, nil
}
