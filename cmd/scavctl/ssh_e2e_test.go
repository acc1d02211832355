package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testnet"
	"github.com/scavenger-ml/scavenger/launchers/ssh"
)

// TestRunOverSSHHosts runs a job with `scavctl run` through a scavd whose
// launcher is ssh, on two namespace hosts (internal/testnet), one rank on
// each, and checks that every step record reached the daemon through the
// socket forwarded to each host over SSH (the hosts share this filesystem,
// so the test checks that SCAV_SOCKET is the forwarded one).
func TestRunOverSSHHosts(t *testing.T) {
	needTorch(t)
	tn := testnet.New(t, 2)
	state := startSSHScavd(t, tn)

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

// startSSHScavd runs scavd with the ssh launcher over tn's hosts (one slot
// each) on a fresh state directory, which it returns once scavd serves.
func startSSHScavd(t *testing.T, tn *testnet.Net) string {
	t.Helper()
	scavd := scavdBinary(t)
	state := stateDir(t)
	args := []string{"--state-dir", state, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--launcher", "ssh",
		"--ssh-key", tn.KeyFile, "--ssh-known-hosts", tn.KnownHosts}
	for _, h := range tn.Inventory(1) {
		args = append(args, "--ssh-host", h)
	}
	d := exec.Command(scavd, args...)
	dlog := startDaemon(t, d, "scavd")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := api.ReadDiscovery(state); err == nil {
			return state
		}
		if time.Now().After(deadline) {
			t.Fatalf("scavd did not start:\n%s", dlog.String())
		}
	}
}

// TestLostHostRelaunchesOnTheOther cuts the link of the second of two hosts
// under a running 2-worker job: the attempt fails fast, the daemon relaunches
// the job at 1 worker on the first host from its last checkpoint, and it
// finishes with every step once. When the host is back, the next job after
// the launcher's probe interval uses both hosts again, and nothing of the
// cut-off attempt is left on it.
func TestLostHostRelaunchesOnTheOther(t *testing.T) {
	needTorch(t)
	tn := testnet.New(t, 2)
	state := startSSHScavd(t, tn)
	cmd, _, errOut := startJob(t, state, "--name", "cut", "--workers", "2", "--batch-size", "32", "--env", "GLOO_SOCKET_IFNAME=eth0",
		"--", pythonBin, "examples/resumable_cnn.py", "--steps", "400", "--checkpoint-every", "20")
	id := waitForRecords(t, state, errOut, 2*50)
	if err := tn.LinkDown(1); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("scavctl run: %v\n%s", err, errOut.String())
	}
	j := jobRecord(t, state, id)
	a := j.Attempts
	if j.State != api.StateSucceeded || len(a) != 2 || !strings.Contains(a[0].EndReason, "lost host "+tn.Hosts[1].Addr) ||
		a[1].Config.Workers != 1 || a[1].Restore == "" {
		t.Fatalf("job record %+v: want succeeded after a second attempt at 1 worker restored from a checkpoint", j)
	}
	// The second attempt goes on from the checkpoint: the steps after it
	// are done again, each step of the job is done.
	var ckpt int64
	if _, err := fmt.Sscanf(filepath.Base(a[1].Restore), "ckpt-%d.pt", &ckpt); err != nil || ckpt%20 != 0 || a[1].FirstStep != ckpt+1 || a[1].LastStep != 400 {
		t.Fatalf("attempt 2 restored %s and ran steps %d-%d; want a periodic checkpoint's and steps from the one after it to 400", a[1].Restore, a[1].FirstStep, a[1].LastStep)
	}
	done := map[int64]bool{}
	for _, r := range steps(t, state, id) {
		done[r.Step] = true
	}
	for s := int64(1); s <= 400; s++ {
		if !done[s] {
			t.Fatalf("step %d has no record", s)
		}
	}
	t.Logf("attempt 1 ended %.1fs after the link went down, at step %d; %d steps redone from the checkpoint of step %d",
		a[0].Ended.Sub(cut).Seconds(), a[0].LastStep, a[0].LastStep-ckpt, ckpt)

	if err := tn.LinkUp(1); err != nil {
		t.Fatal(err)
	}
	// The next start after the probe interval (counted from the loss, which
	// came before the first attempt ended) probes the host again, kills what
	// the cut-off attempt left there, and places a rank on it. Before it,
	// the host counts as still lost: the second attempt may end sooner.
	time.Sleep(time.Until(a[0].Ended.Add(ssh.DefaultProbeInterval)))
	out, e, code := scavctl(t, state, "run", "--workers", "2", "--", "/bin/sh", "-c", `echo "on $(hostname)"`)
	if code != 0 || !strings.Contains(out, "on "+tn.Hosts[1].Name) {
		t.Fatalf("a job after the host came back: exit %d\n%s%s", code, out, e)
	}
}
