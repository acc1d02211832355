// Package dashtool holds what the dashboard's tools share (its screenshots
// and its benchmark): a scavd binary started on a fresh state directory,
// a login link from scavctl, and a process's resident memory.
package dashtool

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/scavenger-ml/scavenger/api"
)

// Scavd is a scavd binary running on a state directory of its own.
type Scavd struct {
	Cmd   *exec.Cmd
	State string
	Info  api.Info
}

// StartScavd starts the scavd binary on a new temporary state directory
// with args added, and waits for its discovery file.
func StartScavd(bin string, args ...string) (*Scavd, error) {
	state, err := os.MkdirTemp("", "scav-dash-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"--state-dir", state, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--log-level", "warn"}, args...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(state)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Scavd{Cmd: cmd, State: state}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if s.Info, err = api.ReadDiscovery(state); err == nil && s.Info.PID == cmd.Process.Pid {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("scavd did not come up within 30 s: %v", err)
		}
	}
}

// Stop stops scavd (SIGTERM, its jobs with it) and removes its state.
func (s *Scavd) Stop() {
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	_ = s.Cmd.Wait()
	os.RemoveAll(s.State)
}

// Scavctl runs the scavctl binary against s and returns its standard output.
func (s *Scavd) Scavctl(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, append([]string{"--state-dir", s.State}, args...)...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return string(out), fmt.Errorf("scavctl %s: %w\n%s", strings.Join(args, " "), err, stderr)
	}
	return string(out), nil
}

// Link is a one-time login link to s's dashboard, from scavctl dashboard.
func (s *Scavd) Link(scavctl string) (string, error) {
	out, err := s.Scavctl(scavctl, "dashboard", "--no-browser")
	if err != nil {
		return "", err
	}
	link, _, _ := strings.Cut(strings.TrimPrefix(out, "Open "), "\n")
	if !strings.Contains(link, "/ui/login?t=") {
		return "", fmt.Errorf("scavctl dashboard printed no link: %q", out)
	}
	return link, nil
}

// Status is a process's memory fields from one read of /proc/PID/status
// (VmRSS, VmHWM for its peak, RssAnon, RssFile, ...), in KiB.
func Status(pid int) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		if !ok || !strings.HasSuffix(v, " kB") {
			continue
		}
		if kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(v, "kB")), 10, 64); err == nil {
			out[k] = kb
		}
	}
	return out, nil
}

// RSS is one memory field of a process (VmRSS, or VmHWM for its peak), in
// bytes.
func RSS(pid int, field string) (int64, error) {
	m, err := Status(pid)
	if err != nil {
		return 0, err
	}
	kb, ok := m[field]
	if !ok {
		return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
	}
	return kb << 10, nil
}
