package ssh

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/scavenger-ml/scavenger/internal/testnet"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/plugins/conformance"
	"github.com/scavenger-ml/scavenger/plugins/goplugin"
)

// lines collects output lines.
type lines struct {
	mu sync.Mutex
	by map[int][]string // rank -> "stream: text"
}

func (l *lines) add(rank int, s plugins.Stream, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[int][]string{}
	}
	l.by[rank] = append(l.by[rank], string(s)+": "+text)
}

func (l *lines) of(rank int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.by[rank]...)
}

func (l *lines) await(t *testing.T, rank int, text string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, s := range l.of(rank) {
			if s == text {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank %d never wrote %q; got %q", rank, text, l.of(rank))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func shSpec(t *testing.T, workers int, script string, out *lines) plugins.AttemptSpec {
	return conformance.ShellSpec(t, workers, script, out.add)
}

// TestSSHD runs every test that needs the real sshd against one instance.
func TestSSHD(t *testing.T) {
	s := startSSHD(t)

	t.Run("Conformance", func(t *testing.T) {
		// The suite's EnvPerRank expects LOCAL_RANK == RANK and
		// LOCAL_WORLD_SIZE == WORLD_SIZE for its 3 workers, i.e. all on one
		// host, so the first host has 3 slots here; TwoHosts checks the
		// placement over both hosts.
		conformance.Run(t, func(t *testing.T) plugins.Launcher { return s.newLauncher(t, s.hosts(3, 2), nil) })
	})

	t.Run("ConformanceOverGRPC", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) plugins.Launcher {
			// Closing the client also stops the server (go-plugin's controller Shutdown).
			client, _ := plugin.TestPluginGRPCConn(t, false, goplugin.PluginSet(s.newLauncher(t, s.hosts(3, 2), nil), zap.NewNop()))
			t.Cleanup(func() { _ = client.Close() })
			raw, err := client.Dispense(goplugin.PluginName)
			if err != nil {
				t.Fatalf("Dispense: %v", err)
			}
			return raw.(plugins.Launcher)
		})
	})

	t.Run("TwoHosts", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, 30*time.Second)
		l := s.newLauncher(t, s.hosts(2, 2), nil)
		var out lines
		sp := shSpec(t, 4, "", &out)
		sp.Command = []string{"/bin/sh", "-c", `set -- $SSH_CONNECTION; echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $3"
read -r pid comm state ppid pgid rest < /proc/$$/stat; echo "$pid $pgid" >&2`}
		h, err := l.Start(ctx, sp)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		res, err := h.Wait(ctx)
		if err != nil || res.ExitCode != 0 || len(res.Ranks) != 4 {
			t.Fatalf("Wait = %+v, %v", res, err)
		}
		want := []string{
			"stdout: 0 4 0 2 127.0.0.1 127.0.0.1",
			"stdout: 1 4 1 2 127.0.0.1 127.0.0.1",
			"stdout: 2 4 0 2 127.0.0.1 127.0.0.2",
			"stdout: 3 4 1 2 127.0.0.1 127.0.0.2",
		}
		for r := range 4 {
			// Each worker leads its own process group, whose id the launcher kills.
			pg := strconv.Itoa(res.Ranks[r].PID)
			w := []string{"stderr: " + pg + " " + pg, want[r]}
			got := out.of(r)
			slices.Sort(got) // the two streams are not ordered with each other
			if !reflect.DeepEqual(got, w) {
				t.Errorf("rank %d: %q, want %q", r, got, w)
			}
		}
		if _, err := l.Start(ctx, shSpec(t, 5, "true", &out)); !errors.Is(err, plugins.ErrUnsupported) {
			t.Errorf("5 workers on 4 slots: %v, want ErrUnsupported", err)
		}
	})

	t.Run("FailureOnOneHostStopsTheOther", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, 30*time.Second)
		l := s.newLauncher(t, s.hosts(1, 1), nil)
		var out lines
		h, err := l.Start(ctx, shSpec(t, 2, `if [ "$RANK" = 1 ]; then sleep 0.3; exit 4; fi; echo ready; exec sleep 30`, &out))
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		begin := time.Now()
		res, err := h.Wait(ctx)
		if err != nil || res.ExitCode != 4 || res.FailedRank != 1 || !res.Ranks[0].Stopped || res.Ranks[0].Signal != "SIGTERM" {
			t.Fatalf("Wait = %+v, %v; want rank 1 failed with 4, rank 0 stopped by SIGTERM", res, err)
		}
		if took := time.Since(begin); took > 5*time.Second {
			t.Errorf("took %v", took)
		}
	})

	t.Run("Injection", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, 30*time.Second)
		l := s.newLauncher(t, s.hosts(1, 1), nil)
		dir := t.TempDir()
		canary := filepath.Join(dir, "pwned")
		nasty := []string{
			"two words",
			"it's",
			`"double"`,
			"$HOME ${HOME} $(touch " + canary + ")",
			"; touch " + canary + ";",
			"`touch " + canary + "`",
			"'; touch " + canary + "; echo '",
			`\'\\"`,
			"a\nb",
			"|&<>*?[]{}~#!",
			"",
			"-n",
		}
		var out lines
		sp := shSpec(t, 2, `for a in "$@"; do printf '[%s]' "$a"; done; echo; printf '%s\n' "$NASTY"`, &out)
		sp.Command = append(sp.Command, append([]string{"sh"}, nasty...)...)
		sp.Env = []string{"NASTY=" + nasty[3] + nasty[4] + nasty[6]}
		sp.Dir = filepath.Join(dir, "dir with 'quote' and $x")
		if err := os.Mkdir(sp.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		h, err := l.Start(ctx, sp)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		res, err := h.Wait(ctx)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Wait = %+v, %v", res, err)
		}
		var b strings.Builder
		for _, a := range nasty {
			b.WriteString("[" + a + "]")
		}
		args := strings.Split(b.String(), "\n")
		want := []string{"stdout: " + args[0], "stdout: " + args[1], "stdout: " + nasty[3] + nasty[4] + nasty[6]}
		for r := range 2 {
			if got := out.of(r); !reflect.DeepEqual(got, want) {
				t.Errorf("rank %d output %q, want %q", r, got, want)
			}
		}
		if _, err := os.Stat(canary); err == nil {
			t.Errorf("an argument was run by a shell: %s exists", canary)
		}
	})

	t.Run("UnknownHostKeyRefused", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, 30*time.Second)
		other := filepath.Join(t.TempDir(), "known_hosts")
		line := knownhosts.Line([]string{hostAddr("127.0.0.1", s.port)}, testnet.WriteKey(t, filepath.Join(t.TempDir(), "k")))
		if err := os.WriteFile(other, []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		l := s.newLauncher(t, s.hosts(1, 1), func(o *Options) { o.KnownHosts = []string{other} })
		h, err := l.Start(ctx, shSpec(t, 1, "true", &lines{}))
		if err == nil {
			_ = h.Stop(ctx, 0)
			t.Fatal("Start with a wrong host key succeeded")
		}
		var ke *knownhosts.KeyError
		if !errors.As(err, &ke) || len(ke.Want) == 0 {
			t.Errorf("Start = %v, want a host key mismatch", err)
		}
	})

	t.Run("UnreachableAtStart", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, 30*time.Second)
		// Nothing listens on this port of 127.0.0.2: the dial is refused.
		ln, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		hosts := s.hosts(1, 1)
		hosts[1].Port = dead
		l := s.newLauncher(t, hosts, func(o *Options) { o.ProbeInterval = time.Hour })
		if _, err := l.Start(ctx, shSpec(t, 2, "true", &lines{})); !errors.Is(err, ErrHostUnreachable) {
			t.Fatalf("Start with a host down: %v, want ErrHostUnreachable", err)
		}
		// Left out until it answers: the next attempt fits on what is left.
		caps, err := l.Capabilities(ctx)
		if err != nil || caps.MaxWorkers != 1 || !reflect.DeepEqual(caps.Hosts, []string{"127.0.0.1"}) {
			t.Errorf("Capabilities = %+v, %v; want 127.0.0.1 only", caps, err)
		}
		h, err := l.Start(ctx, shSpec(t, 1, "true", &lines{}))
		if err != nil {
			t.Fatalf("Start of 1 worker: %v", err)
		}
		if res, err := h.Wait(ctx); err != nil || res.ExitCode != 0 || len(res.LostHosts) != 0 {
			t.Errorf("Wait = %+v, %v", res, err)
		}
	})

	t.Run("HostLost", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, 30*time.Second)
		p := newFreezingProxy(t, "127.0.0.2", hostAddr("127.0.0.2", s.port))
		kh := filepath.Join(t.TempDir(), "known_hosts")
		line := knownhosts.Line([]string{hostAddr("127.0.0.2", p.port)}, s.hostKey)
		if err := os.WriteFile(kh, []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		hosts := s.hosts(1, 1)
		hosts[1].Port = p.port
		l := s.newLauncher(t, hosts, func(o *Options) { o.KnownHosts = append(o.KnownHosts, kh) })
		var out lines
		h, err := l.Start(ctx, shSpec(t, 2, `echo "ready $$"; exec sleep 30`, &out))
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		// The worker behind the frozen link survives it (as on a real
		// host that is cut off); kill it here, where the "host" is local.
		ready := func(rank int) int { // the rank's process group, once it said it is ready
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				for _, ln := range out.of(rank) {
					if s, ok := strings.CutPrefix(ln, "stdout: ready "); ok {
						pg, _ := strconv.Atoi(s)
						return pg
					}
				}
			}
			t.Fatalf("rank %d did not start: %q", rank, out.of(rank))
			return 0
		}
		pgid := ready(1)
		t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
		ready(0)

		p.freeze()
		begin := time.Now()
		res, err := h.Wait(ctx)
		took := time.Since(begin)
		// The loss is in the Result, which crosses gRPC, not in an error.
		if err != nil {
			t.Errorf("Wait error = %v, want none", err)
		}
		if res.FailedRank != 1 || res.ExitCode != 255 || !res.Ranks[0].Stopped || !reflect.DeepEqual(res.LostHosts, []string{"127.0.0.2"}) {
			t.Errorf("Result = %+v, want rank 1 failed (255), rank 0 stopped, 127.0.0.2 lost", res)
		}
		if took > 5*time.Second {
			t.Errorf("lost host detected after %v", took)
		}
		// Within the probe interval the lost host is not offered.
		caps, err := l.Capabilities(ctx)
		if err != nil || caps.MaxWorkers != 1 || !reflect.DeepEqual(caps.Hosts, []string{"127.0.0.1"}) {
			t.Errorf("Capabilities = %+v, %v; want only 127.0.0.1", caps, err)
		}
		if _, err := l.Start(ctx, shSpec(t, 2, "true", &lines{})); !errors.Is(err, plugins.ErrUnsupported) {
			t.Errorf("Start of 2 workers with a host lost: %v, want ErrUnsupported", err)
		}
	})
}

// freezingProxy forwards TCP connections until freeze, after which it
// holds them open and forwards nothing: a host whose link went down.
type freezingProxy struct {
	port   int
	ln     net.Listener
	mu     sync.Mutex
	frozen bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newFreezingProxy(t *testing.T, addr, target string) *freezingProxy {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	p := &freezingProxy{port: ln.Addr().(*net.TCPAddr).Port, ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Go(func() { p.pipe(u, c) })
			p.wg.Go(func() { p.pipe(c, u) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *freezingProxy) freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

func (p *freezingProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		frozen := p.frozen
		p.mu.Unlock()
		if !frozen && n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}
