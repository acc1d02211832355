package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/daemon"
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
