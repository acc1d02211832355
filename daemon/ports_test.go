package daemon

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/internal/testdir"
	"github.com/scavenger-ml/scavenger/internal/testuser"
)

// TestPortTakenByAUser: issue 20's port attack. A user binds the NATS port
// or the /metrics port before root's scavd starts: scavd refuses at once,
// naming the holder's pid and user, instead of waiting 10 s and guessing.
func TestPortTakenByAUser(t *testing.T) {
	mallory := testuser.Add(t, "m")
	for _, which := range []string{"nats", "metrics"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, port, _ := net.SplitHostPort(addr)
		holder := mallory.Command("/", nil, "/usr/bin/python3", "-c",
			fmt.Sprintf("import socket, time\ns = socket.socket(); s.bind(('127.0.0.1', %s)); s.listen(); print('ok', flush=True); time.sleep(60)", port))
		out, _ := holder.StdoutPipe()
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
		if _, err := out.Read(make([]byte, 3)); err != nil {
			t.Fatalf("mallory's listener: %v", err)
		}
		cfg := Config{StateDir: testdir.Short(t, "scavd-port-"), Listen: "127.0.0.1:0", NodeSampleEvery: -1}
		if which == "nats" {
			cfg.Listen = addr
		} else {
			cfg.MetricsListen = addr
		}
		start := time.Now()
		d, err := Start(context.Background(), cfg, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
		if err == nil {
			d.Close()
			t.Errorf("%s port taken by mallory: scavd started", which)
			continue
		}
		pid := strconv.Itoa(holder.Process.Pid)
		if !strings.Contains(err.Error(), "in use by pid "+pid) || !strings.Contains(err.Error(), "user "+mallory.Name) || time.Since(start) > 5*time.Second {
			t.Errorf("%s port taken by mallory's pid %s: after %v: %v", which, pid, time.Since(start), err)
		}
	}
}
