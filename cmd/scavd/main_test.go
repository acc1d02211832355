package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/daemon"
	"github.com/scavenger-ml/scavenger/internal/testnet"
	"github.com/scavenger-ml/scavenger/plugins"
)

// TestServesBuiltinLauncherAsPlugin builds scavd and loads it as an external
// launcher plugin: the same binary serves its built-in launcher over gRPC.
func TestServesBuiltinLauncherAsPlugin(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "scavd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build scavd: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, closePlugin, err := daemon.LoadPlugin(ctx, bin, hex.EncodeToString(sum[:]), zaptest.NewLogger(t))
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
	if _, _, err := daemon.LoadPlugin(ctx, bin, "00", zaptest.NewLogger(t)); err == nil {
		t.Fatal("a malformed checksum was accepted")
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
		err := run(context.Background(), args)
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
		opts := sshFlags(f)
		// The second host names no user: --ssh-user applies.
		if err := f.Parse([]string{"--ssh-inventory", inv, "--ssh-host", tn.Hosts[1].Addr + ",slots=1", "--ssh-user", "root",
			"--ssh-key", tn.KeyFile, "--ssh-known-hosts", tn.KnownHosts, "--ssh-forward-telemetry=" + strconv.FormatBool(forward)}); err != nil {
			t.Fatal(err)
		}
		l, err := daemon.Builtins(daemon.BuiltinOptions{SSH: opts()}).New("ssh", zaptest.NewLogger(t))
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
