package conformance_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scavenger-ml/scavenger/launchers/local"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/plugins/conformance"
	"github.com/scavenger-ml/scavenger/plugins/goplugin"
	pb "github.com/scavenger-ml/scavenger/plugins/proto"
)

// grace is the local launcher's grace for the peers of a failed rank.
const grace = 500 * time.Millisecond

func newLocal() *local.Launcher {
	return local.New(local.Options{Logger: zap.NewNop(), Grace: grace})
}

func TestMain(m *testing.M) {
	code := m.Run()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	if code == 0 {
		if left := children(); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "processes left behind: %v\n", left)
			code = 1
		}
	}
	os.Exit(code)
}

// children lists the live (not zombie) child processes of the test.
func children() []string {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var left []string
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[0] != "Z" && f[1] == fmt.Sprint(os.Getpid()) {
			left = append(left, s[:i+1])
		}
	}
	return left
}

// TestLocal runs the suite against the local launcher in process.
func TestLocal(t *testing.T) {
	conformance.Run(t, func(t *testing.T) plugins.Launcher { return newLocal() })
}

// TestLocalOverGRPC runs the suite against the local launcher served over
// real gRPC, on go-plugin's in-process test connection.
func TestLocalOverGRPC(t *testing.T) {
	conformance.Run(t, func(t *testing.T) plugins.Launcher {
		// Closing the client also stops the server (go-plugin's controller
		// Shutdown); stopping it here as well would race with that.
		client, _ := plugin.TestPluginGRPCConn(t, false, goplugin.PluginSet(newLocal(), zap.NewNop()))
		t.Cleanup(func() { _ = client.Close() })
		raw, err := client.Dispense(goplugin.PluginName)
		if err != nil {
			t.Fatalf("Dispense: %v", err)
		}
		return raw.(plugins.Launcher)
	})
}

var (
	buildOnce sync.Once
	dir       string // holds the built plugin binary
	binary    string
	buildErr  error
)

// pluginBinary builds launchers/builtin/internal/localplugin once and returns its
// path and sha256.
func pluginBinary(t *testing.T) (string, []byte) {
	t.Helper()
	buildOnce.Do(func() {
		dir, buildErr = os.MkdirTemp("", "scav-localplugin-")
		if buildErr != nil {
			return
		}
		binary = filepath.Join(dir, "localplugin")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/scavenger-ml/scavenger/launchers/builtin/internal/localplugin").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build plugin: %v", buildErr)
	}
	f, err := os.Open(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return binary, h.Sum(nil)
}

func load(t *testing.T, log *zap.Logger) plugins.Launcher {
	t.Helper()
	path, sum := pluginBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, closeFn, err := goplugin.Load(ctx, path, sum, log)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(closeFn)
	return l
}

// TestExternalPlugin runs the suite against the local launcher in a plugin
// binary built here and loaded with its checksum.
func TestExternalPlugin(t *testing.T) {
	conformance.Run(t, func(t *testing.T) plugins.Launcher { return load(t, zap.NewNop()) })
}

// TestExternalPluginLogs checks that the plugin's zap lines reach the host's
// zap logger with their level and message.
func TestExternalPluginLogs(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := load(t, zap.New(core))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := l.Start(ctx, plugins.AttemptSpec{JobID: "logs", Attempt: 1, Command: []string{"/bin/true"}, Config: plugins.Config{Workers: 1}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if _, err := h.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	for len(logs.FilterMessage("attempt finished").All()) == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("the plugin's 'attempt finished' line never reached the host; got %d entries", logs.Len())
		case <-time.After(10 * time.Millisecond):
		}
	}
	e := logs.FilterMessage("attempt finished").All()[0]
	if e.Level != zapcore.InfoLevel {
		t.Errorf("level = %v, want info", e.Level)
	}
	if !strings.HasPrefix(e.LoggerName, "plugin") {
		t.Errorf("logger name = %q, want it under plugin", e.LoggerName)
	}
}

// TestLoadWrongChecksum checks that a binary whose sha256 differs is not run.
func TestLoadWrongChecksum(t *testing.T) {
	path, sum := pluginBinary(t)
	bad := append([]byte(nil), sum...)
	bad[0] ^= 0xff
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct {
		name string
		sum  []byte
		want string
	}{
		{"wrong", bad, fmt.Sprintf("sha256 is %x", sum)},
		{"short", sum[:8], "want a sha256 checksum of 32 bytes"},
		{"none", nil, "got 0 bytes"},
	} {
		l, closeFn, err := goplugin.Load(ctx, path, c.sum, zap.NewNop())
		if err == nil {
			closeFn()
			t.Fatalf("%s checksum: Load succeeded with launcher %q", c.name, l.Name())
		}
		if !errors.Is(err, plugins.ErrPluginChecksum) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s checksum: Load = %v, want ErrPluginChecksum mentioning %q", c.name, err, c.want)
		}
	}
}

// TestServerHandles checks the wire answers for what the Launcher interface
// does not reach: a launcher that cannot reattach answers Recover with
// ErrUnsupported, and an unknown handle is NotFound.
func TestServerHandles(t *testing.T) {
	client, _ := plugin.TestPluginGRPCConn(t, false, goplugin.PluginSet(newLocal(), zap.NewNop()))
	t.Cleanup(func() { _ = client.Close() })
	c := pb.NewLauncherClient(client.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := client.Dispense(goplugin.PluginName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.(plugins.Recoverer).Recover(ctx, plugins.RecoverSpec{JobID: "j", Attempt: 1, HandleID: "1"}); !errors.Is(err, plugins.ErrUnsupported) {
		t.Errorf("Recover = %v, want ErrUnsupported", err)
	}
	if _, err := c.Wait(ctx, &pb.WaitRequest{HandleId: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("Wait(unknown) = %v, want NotFound", err)
	}
	if _, err := c.Signal(ctx, &pb.SignalRequest{HandleId: "nope", Signal: 10}); status.Code(err) != codes.NotFound {
		t.Errorf("Signal(unknown) = %v, want NotFound", err)
	}
}
