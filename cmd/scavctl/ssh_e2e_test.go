package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/daemon"
	"github.com/scavenger-ml/scavenger/internal/testnet"
)

// TestRunOverSSHHosts runs a job with `scavctl run` through a scavd whose
// launcher is ssh, on two namespace hosts (internal/testnet), one rank on
// each, and checks that every step record reached the daemon through the
// socket forwarded to each host over SSH (the hosts share this filesystem,
// so the test checks that SCAV_SOCKET is the forwarded one).
func TestRunOverSSHHosts(t *testing.T) {
	needTorch(t)
	tn := testnet.New(t, 2)
	scavd := filepath.Join(filepath.Dir(scavctlBin), "scavd")
	if out, err := exec.Command("go", "build", "-o", scavd, "../scavd").CombinedOutput(); err != nil {
		t.Fatalf("build scavd: %v\n%s", err, out)
	}
	state := stateDir(t)
	args := []string{"--state-dir", state, "--listen", "127.0.0.1:0", "--launcher", "ssh",
		"--ssh-key", tn.KeyFile, "--ssh-known-hosts", tn.KnownHosts}
	for _, h := range tn.Inventory(1) {
		args = append(args, "--ssh-host", h)
	}
	d := exec.Command(scavd, args...)
	var dlog syncBuffer
	d.Stdout, d.Stderr = &dlog, &dlog
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.Process.Signal(syscall.SIGTERM)
		_ = d.Wait()
		if t.Failed() {
			t.Logf("scavd:\n%s", dlog.String())
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := daemon.ReadDiscovery(state); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scavd did not start:\n%s", dlog.String())
		}
	}

	const n = 8
	// gloo finds its address from the hostname, which does not resolve on
	// these hosts: name the interface.
	out, errOut, code := scavctl(t, state, "run", "--workers", "2", "--batch-size", "32", "--env", "GLOO_SOCKET_IFNAME=eth0",
		"--", "/bin/sh", "-c", `echo "on $(hostname) socket $SCAV_SOCKET"; exec "$0" examples/cnn.py --steps "$1"`, pythonBin, strconv.Itoa(n))
	if code != 0 {
		t.Fatalf("scavctl run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for r, h := range tn.Hosts {
		// The forwarded socket is in a private directory made for the
		// attempt on that host (the daemon's own is <state>/scavd.sock).
		re := regexp.MustCompile(fmt.Sprintf(`\[%d\] on %s socket /tmp/scav-[\w.-]+-a1-\w{8}/telemetry\.sock\n`, r, regexp.QuoteMeta(h.Name)))
		if !re.MatchString(out) || strings.Contains(out, state) {
			t.Errorf("rank %d did not get a forwarded socket on %s (want %s):\n%s", r, h.Name, re, out)
		}
	}
	recs := steps(t, state, jobID(t, errOut))
	if last := checkEveryStepOnce(t, recs); last != n || len(recs) != 2*n {
		t.Errorf("%d step records up to step %d, want %d up to %d", len(recs), last, 2*n, n)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
