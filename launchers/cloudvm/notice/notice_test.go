package notice

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/internal/syncbuf"
)

// buildMock builds AWS's amazon-ec2-metadata-mock (a tool of this module).
func buildMock(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ec2-metadata-mock")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock").CombinedOutput()
	if err != nil {
		t.Fatalf("build amazon-ec2-metadata-mock: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startMock runs the mock in spot mode, IMDSv2 only, with the rebalance
// recommendation after rebalance and the interruption after interrupt
// seconds, and returns its endpoint.
func startMock(t *testing.T, bin string, rebalance, interrupt int) string {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(bin, "spot", "-n", "127.0.0.1", "-p", strconv.Itoa(port), "-I",
		"-d", strconv.Itoa(interrupt), "--rebalance-delay-sec", strconv.Itoa(rebalance))
	cmd.Dir, cmd.Env = t.TempDir(), append(os.Environ(), "HOME="+t.TempDir())
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("mock output:\n%s", out.String())
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mock does not listen on %s:\n%s", addr, out.String())
		}
	}
}

// TestAgainstAWSMetadataMock is the watcher's conformance check against
// AWS's own mock of the metadata service (spot mode, IMDSv2 only): no
// notice before the delays, then the rebalance recommendation, then the
// termination notice about two minutes ahead.
func TestAgainstAWSMetadataMock(t *testing.T) {
	bin := buildMock(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The mock counts its delays in whole seconds: on a loaded machine its
	// 2 s delay was once answered 1.2 s after it was started. A notice may
	// come up to a second before a delay measured from here.
	began := time.Now()
	endpoint := startMock(t, bin, 2, 4)

	w := New(Options{Endpoint: endpoint, Interval: 100 * time.Millisecond, Rebalance: true})
	defer w.Close()
	if n, ok, err := w.Poll(ctx); err != nil || ok && time.Since(began) < time.Second {
		t.Fatalf("Poll before the delays = %+v, %v, %v; want no notice", n, ok, err) // (a slow start may reach them)
	}
	n, err := w.Wait(ctx, func(err error) { t.Logf("poll: %v", err) })
	if err != nil || n.Kind != KindRebalance || n.Time.IsZero() {
		t.Fatalf("first notice %+v, %v; want a rebalance recommendation", n, err)
	}
	if d := time.Since(began); d < time.Second {
		t.Errorf("rebalance recommendation after %s, a second before its 2 s delay", d)
	}

	interruptions := New(Options{Endpoint: endpoint, Interval: 100 * time.Millisecond})
	defer interruptions.Close()
	n, err = interruptions.Wait(ctx, nil)
	if err != nil || n.Kind != KindInterruption || n.Action != "terminate" {
		t.Fatalf("notice %+v, %v; want a termination", n, err)
	}
	if d := time.Since(began); d < 3*time.Second {
		t.Errorf("termination notice after %s, a second before its 4 s delay", d)
	}
	if ahead := time.Until(n.Time); ahead < time.Minute || ahead > 3*time.Minute {
		t.Errorf("termination at %s, %s from now; want about two minutes ahead", n.Time, ahead)
	}
}

// TestNoServiceIsAnError checks that a poll that cannot reach the service
// says so (the watcher goes on polling) rather than reporting no notice.
func TestNoServiceIsAnError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w := New(Options{Endpoint: "http://127.0.0.1:" + strconv.Itoa(freePort(t))})
	defer w.Close()
	if _, ok, err := w.Poll(ctx); err == nil || ok {
		t.Fatalf("Poll of nothing = %v, %v; want an error", ok, err)
	}
}
