package local

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/internal/procstat"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/plugins/conformance"
)

// output collects the lines an attempt delivers.
type output struct {
	mu    sync.Mutex
	lines map[int]map[plugins.Stream][]string
}

func newOutput() *output { return &output{lines: map[int]map[plugins.Stream][]string{}} }

func (o *output) add(rank int, s plugins.Stream, line string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lines[rank] == nil {
		o.lines[rank] = map[plugins.Stream][]string{}
	}
	o.lines[rank][s] = append(o.lines[rank][s], line)
}

func (o *output) get(rank int, s plugins.Stream) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.lines[rank][s]...)
}

func (o *output) has(rank int, s plugins.Stream, line string) bool {
	for _, l := range o.get(rank, s) {
		if l == line {
			return true
		}
	}
	return false
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newLauncher(t *testing.T, opts Options) *Launcher {
	t.Helper()
	opts.Logger = zaptest.NewLogger(t)
	return New(opts)
}

// shSpec is a spec running the shell script on every rank.
func shSpec(t *testing.T, workers int, script string, out *output) plugins.AttemptSpec {
	if out == nil {
		return conformance.ShellSpec(t, workers, script, nil)
	}
	return conformance.ShellSpec(t, workers, script, out.add)
}

func waitResult(t *testing.T, h plugins.Handle, timeout time.Duration) plugins.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := h.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return res
}

// procState returns the state letter of pid, or 0 when it does not exist.
func procState(t *testing.T, pid int) byte {
	t.Helper()
	st, err := procstat.Read(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatalf("read /proc/%d/stat: %v", pid, err)
	}
	return st.State
}

// assertGone fails unless pid no longer exists or, when zombieOK, is a zombie.
func assertGone(t *testing.T, pid int, zombieOK bool) {
	t.Helper()
	switch s := procState(t, pid); {
	case s == 0:
	case s == 'Z' && zombieOK:
	default:
		t.Errorf("process %d is still there in state %c", pid, s)
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, 5*time.Second, "pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}
