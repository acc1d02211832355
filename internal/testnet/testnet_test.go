package testnet

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// TestTwoHosts checks that each host answers SSH under its own name and
// address, reaches the other, and vanishes while its link is down.
func TestTwoHosts(t *testing.T) {
	tn := New(t, 2)
	b, err := os.ReadFile(tn.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	hk, err := knownhosts.New(tn.KnownHosts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &gossh.ClientConfig{User: "root", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)}, HostKeyCallback: hk, Timeout: 2 * time.Second}
	run := func(h *Host, cmd string) (string, error) {
		c, err := gossh.Dial("tcp", net.JoinHostPort(h.Addr, strconv.Itoa(SSHPort)), cfg)
		if err != nil {
			return "", err
		}
		defer c.Close()
		s, err := c.NewSession()
		if err != nil {
			return "", err
		}
		defer s.Close()
		out, err := s.CombinedOutput(cmd)
		return strings.TrimSpace(string(out)), err
	}
	for i, h := range tn.Hosts {
		other := tn.Hosts[1-i]
		// bash's /dev/tcp is not in sh; exec 3<> in bash connects to the other sshd.
		got, err := run(h, `hostname; set -- $SSH_CONNECTION; echo $3; bash -c 'exec 3<>/dev/tcp/`+other.Addr+`/22 && head -c 4 <&3'`)
		want := h.Name + "\n" + h.Addr + "\nSSH-"
		if err != nil || got != want {
			t.Errorf("host %d: %q, %v; want %q", i, got, err, want)
		}
		var sshd bool
		for _, p := range tn.Procs(i) {
			sshd = sshd || p.PID == h.machine.PID && p.Comm == "sshd"
		}
		if !sshd {
			t.Errorf("host %d: its sshd (pid %d) is not among its processes %v", i, h.machine.PID, tn.Procs(i))
		}
	}
	if err := tn.LinkDown(1); err != nil {
		t.Fatal(err)
	}
	if _, err := run(tn.Hosts[1], "true"); err == nil {
		t.Error("host 2 answered with its link down")
	}
	if err := tn.LinkUp(1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := run(tn.Hosts[1], "true")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host 2 does not answer after its link came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// recorder keeps the errors reported to it and passes the rest to the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCleanupReportsLeftovers leaves a detached process on a host: the
// cleanup must report it, kill it and still remove everything.
func TestCleanupReportsLeftovers(t *testing.T) {
	rec := &recorder{TB: t}
	var pid int
	t.Cleanup(func() { // runs after the testnet's cleanup
		if pid == 0 {
			return // New skipped the test
		}
		if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], "processes left on") || !strings.Contains(rec.errs[0], strconv.Itoa(pid)+"(sleep,") {
			t.Errorf("cleanup reported %q, want the sleep %d left behind", rec.errs, pid)
		}
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("the leftover %d still runs", pid)
		}
	})
	tn := New(rec, 1)
	tn.settle = 500 * time.Millisecond
	cmd := exec.Command("ip", "netns", "exec", tn.Hosts[0].NS, "setsid", "-f", "sh", "-c", "echo $$; exec sleep 60 >/dev/null 2>&1 </dev/null")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if pid, err = strconv.Atoi(strings.TrimSpace(string(out))); err != nil {
		t.Fatal(err)
	}
}
