package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/launchers/builtin"

	"github.com/spf13/pflag"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/internal/subreaper"
	"github.com/scavenger-ml/scavenger/internal/testdir"
	"github.com/scavenger-ml/scavenger/internal/testnet"
	"github.com/scavenger-ml/scavenger/internal/testproc"
	"github.com/scavenger-ml/scavenger/plugins"
)

// TestServesBuiltinLauncherAsPlugin builds scavd and loads it as an external
// launcher plugin: the same binary serves its built-in launcher over gRPC.
func TestServesBuiltinLauncherAsPlugin(t *testing.T) {
	bin := scavdBinary(t)
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, closePlugin, err := builtin.OpenPlugin(ctx, bin, hex.EncodeToString(sum[:]), zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("load scavd as a plugin: %v", err)
	}
	defer closePlugin()
	if l.Name() != "local" {
		t.Errorf("plugin launcher %q, want local", l.Name())
	}
	var mu sync.Mutex
	var lines []string
	h, err := l.Start(ctx, plugins.AttemptSpec{JobID: "p-1", Attempt: 1, Command: []string{"/bin/sh", "-c", "echo rank $RANK of $WORLD_SIZE"},
		Config: plugins.Config{Workers: 2}, Output: func(rank int, _ plugins.Stream, line string) {
			mu.Lock()
			lines = append(lines, line)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(ctx)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("wait: %+v, %v", res, err)
	}
	mu.Lock()
	got := strings.Join(lines, ";")
	mu.Unlock()
	if !strings.Contains(got, "rank 0 of 2") || !strings.Contains(got, "rank 1 of 2") {
		t.Fatalf("output %q", got)
	}
	if _, _, err := builtin.OpenPlugin(ctx, bin, "00", zaptest.NewLogger(t)); err == nil {
		t.Fatal("a malformed checksum was accepted")
	}
}

// startScavd runs scavd on state and returns it with a client once it answers.
func startScavd(t *testing.T, state string) (*exec.Cmd, *api.Client) {
	t.Helper()
	cmd := exec.Command(scavdBinary(t), "--state-dir", state, "--listen", "127.0.0.1:0", "--log-level", "warn")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	testproc.Start(t, cmd)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if info, err := api.ReadDiscovery(state); err == nil && info.PID == cmd.Process.Pid {
			if c, err := api.Dial(ctx, info.API, 2*time.Second); err == nil {
				t.Cleanup(c.Close)
				return cmd, c
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("scavd did not answer within 30s:\n%s", errOut.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestRestartAfterCrashRecordsTheLostJob crashes scavd (SIGKILL) under a
// running job: the restarted daemon finds the job's record, cannot reattach
// to local workers, records the job as failed with how to resume it, and
// kills the worker the crash left behind.
func TestRestartAfterCrashRecordsTheLostJob(t *testing.T) {
	// Orphans of the crashed daemon come to this process, which reaps them.
	if err := subreaper.Become(); err != nil {
		t.Fatal(err)
	}
	state := testdir.Short(t, "scav-")
	pidFile := filepath.Join(state, "worker.pid")
	first, c := startScavd(t, state)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j, err := c.Run(ctx, api.RunRequest{Name: "crash", Dir: state, Config: plugins.Config{Workers: 1},
		Command: []string{"/bin/sh", "-c", `echo $$ > "$0"; exec sleep 120`, pidFile}})
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for pid == 0 {
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if ctx.Err() != nil {
			t.Fatal("the worker never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = first.Process.Signal(syscall.SIGKILL)
	_ = first.Wait()
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the worker died with the daemon (%v); the test needs it left behind", err)
	}

	_, c2 := startScavd(t, state)
	var got api.Job
	for got, _ = c2.Job(ctx, j.ID); !got.State.Done(); got, _ = c2.Job(ctx, j.ID) {
		if ctx.Err() != nil {
			t.Fatalf("the restarted daemon did not settle the job: %+v", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got.State != api.StateFailed || !strings.Contains(got.Message, "lost") || !strings.Contains(got.Message, "1 leftover worker") {
		t.Fatalf("job after the restart: state %s, message %q", got.State, got.Message)
	}
	for {
		subreaper.ReapOrphans() // the killed orphan
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("worker %d is still there after the restart", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSSHFlagErrors checks that scavd refuses bad --ssh-* flags before it
// starts anything, naming the flag or the inventory line to fix.
func TestSSHFlagErrors(t *testing.T) {
	inv := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(inv, []byte("# the cluster\n10.0.0.5 slots=2\n\nroot@10.0.0.6:2222 gpus=4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(known, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--launcher", "ssh"}, []string{"no hosts", "--ssh-host", "--ssh-inventory"}},
		{[]string{"--launcher", "ssh", "--ssh-inventory", inv}, []string{"--ssh-inventory", inv, "line 4", `unknown field "gpus=4"`}},
		{[]string{"--launcher", "ssh", "--ssh-host", "10.0.0.5 slots=0", "--ssh-host", "h:99999"}, []string{"--ssh-host", `slots "0"`, `bad port "99999"`}},
		{[]string{"--launcher", "ssh", "--ssh-inventory", filepath.Join(t.TempDir(), "absent")}, []string{"--ssh-inventory", "no such file"}},
		{[]string{"--launcher", "ssh", "--ssh-host", "10.0.0.5", "--ssh-known-hosts", known}, []string{"--ssh-key", "--ssh-agent", "nothing to authenticate with"}},
		{[]string{"--launcher", "ssh", "--ssh-host", "10.0.0.5", "--ssh-known-hosts", inv + ".absent"}, []string{"known_hosts", inv + ".absent"}},
		{[]string{"--ssh-host", "10.0.0.5"}, []string{"--launcher ssh", `"local"`}},
	} {
		args := append([]string{"--state-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		err := run(context.Background(), args, io.Discard)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("scavd %q: %v, want an error with %q", tc.args, err, w)
				break
			}
		}
	}
}

// TestSSHFlagsMakeALauncher builds the ssh launcher from scavd's flags and
// runs workers with it on two namespace hosts (internal/testnet).
func TestSSHFlagsMakeALauncher(t *testing.T) {
	tn := testnet.New(t, 2)
	inv := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(inv, []byte(tn.Inventory(1)[0]+" # first host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, forward := range []bool{true, false} {
		f := pflag.NewFlagSet("scavd", pflag.ContinueOnError)
		var s settings
		bindFlags(f, &s)
		// The second host names no user: --ssh-user applies.
		if err := f.Parse([]string{"--ssh-inventory", inv, "--ssh-host", tn.Hosts[1].Addr + ",slots=1", "--ssh-user", "root",
			"--ssh-key", tn.KeyFile, "--ssh-known-hosts", tn.KnownHosts, "--ssh-forward-telemetry=" + strconv.FormatBool(forward)}); err != nil {
			t.Fatal(err)
		}
		l, err := builtin.Catalog(s.builtinOptions(), nil).New("ssh", zaptest.NewLogger(t))
		if err != nil {
			t.Fatalf("new ssh launcher: %v", err)
		}
		caps, err := l.Capabilities(ctx)
		if err != nil || caps.MaxWorkers != 2 || !slices.Equal(caps.Hosts, []string{tn.Hosts[0].Addr, tn.Hosts[1].Addr}) {
			t.Fatalf("Capabilities = %+v, %v", caps, err)
		}
		var mu sync.Mutex
		got := map[int]string{}
		sock := filepath.Join(t.TempDir(), "scavd.sock")
		h, err := l.Start(ctx, plugins.AttemptSpec{JobID: "flags", Attempt: 1, Socket: sock, Mode: plugins.ModeRanks,
			Command: []string{"/bin/sh", "-c", `echo "$(hostname) $SCAV_SOCKET"`}, Config: plugins.Config{Workers: 2},
			Output: func(rank int, _ plugins.Stream, line string) { mu.Lock(); got[rank] = line; mu.Unlock() }})
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		if res, err := h.Wait(ctx); err != nil || res.ExitCode != 0 {
			t.Fatalf("Wait = %+v, %v", res, err)
		}
		mu.Lock()
		for r := range 2 {
			host, socket, _ := strings.Cut(got[r], " ")
			if host != tn.Hosts[r].Name || forward == (socket == sock) || forward != strings.HasPrefix(socket, "/tmp/scav-flags-a1-") {
				t.Errorf("forward %v: rank %d wrote %q; want host %s and the socket %s", forward, r, got[r], tn.Hosts[r].Name,
					map[bool]string{true: "forwarded under /tmp", false: sock}[forward])
			}
		}
		mu.Unlock()
	}
}
