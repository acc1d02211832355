package ssh

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/scavenger-ml/scavenger/internal/testnet"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/plugins/goplugin"
)

// torchPython is the interpreter with torch (Debian's python3-torch).
const torchPython = "/usr/bin/python3"

// ddpScript all-reduces a tensor of ones once, prints what the rank sees,
// then all-reduces argv[1] more times (forever for 0) and exits 0. With
// argv[2] "hang", a rank whose all-reduce fails (its peer is gone) does not
// exit but sleeps, as a worker stuck elsewhere would.
const ddpScript = `import socket, sys, time
import torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
t = torch.ones(4)
dist.all_reduce(t)
print(f"rank {r} world {w} host {socket.gethostname()} sum {int(t[0])}", flush=True)
steps, i = int(sys.argv[1]), 0
try:
    while steps == 0 or i < steps:
        dist.all_reduce(t)
        i += 1
        time.sleep(0.01)
except Exception as e:
    if sys.argv[2:] != ["hang"]:
        raise
    time.sleep(3600)  # not even a print: its stdout may be gone
dist.destroy_process_group()
`

// TestNetns runs the launcher against hosts in network namespaces
// (internal/testnet): each has its own address, hostname and sshd.
func TestNetns(t *testing.T) {
	if _, err := os.Stat(torchPython); err != nil {
		t.Skipf("SKIP: %s is absent: %v", torchPython, err)
	}
	tn := testnet.New(t, 2)
	hosts, err := ParseHosts(tn.Inventory(1))
	if err != nil {
		t.Fatal(err)
	}
	newLauncher := func(t *testing.T, log *zap.Logger) *Launcher {
		if log == nil {
			log = zaptest.NewLogger(t)
		}
		l, err := New(Options{
			Logger:            log,
			Hosts:             hosts,
			KeyFiles:          []string{tn.KeyFile},
			KnownHosts:        []string{tn.KnownHosts},
			Grace:             time.Second,
			KeepaliveInterval: 250 * time.Millisecond,
			KeepaliveTimeout:  time.Second,
			ProbeTimeout:      time.Second,
			ProbeInterval:     time.Millisecond, // probe a lost host on every call
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	torchSpec := func(t *testing.T, workers, steps int, out *lines) plugins.AttemptSpec {
		return plugins.AttemptSpec{
			JobID:   strings.ReplaceAll(t.Name(), "/", "-"),
			Attempt: 1,
			Command: []string{torchPython, "-c", ddpScript, fmt.Sprint(steps)},
			Dir:     t.TempDir(),
			// gloo finds its address from the hostname, which does not
			// resolve here; name the interface instead.
			Env:    []string{"GLOO_SOCKET_IFNAME=eth0", "OMP_NUM_THREADS=1"},
			Config: plugins.Config{Workers: workers},
			Mode:   plugins.ModeRanks,
			Output: out.add,
		}
	}
	rankLine := func(r, world, host, sum int) string {
		return fmt.Sprintf("stdout: rank %d world %d host %s sum %d", r, world, tn.Hosts[host].Name, sum)
	}

	t.Run("TorchTwoHosts", func(t *testing.T) {
		ctx := testCtx(t, 60*time.Second)
		l := newLauncher(t, nil)
		var out lines
		sp := torchSpec(t, 2, 5, &out)
		sp.Socket = newTestDaemon(t).path // forwarded (the default), unused by the script
		h, err := l.Start(ctx, sp)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		res, err := h.Wait(ctx)
		if err != nil || res.ExitCode != 0 || len(res.Ranks) != 2 || len(res.LostHosts) != 0 {
			t.Fatalf("Wait = %+v, %v; output %q %q", res, err, out.of(0), out.of(1))
		}
		for r := range 2 {
			// Each rank on its own host: the hostname it sees is that
			// namespace's, and the all-reduce summed both ranks.
			if got, want := out.of(r), rankLine(r, 2, r, 2); !slices.Contains(got, want) {
				t.Errorf("rank %d wrote %q, want %q", r, got, want)
			}
		}
	})

	t.Run("TelemetryForwarded", func(t *testing.T) {
		ctx := testCtx(t, 30*time.Second)
		l := newLauncher(t, nil)
		d := newTestDaemon(t)
		var out lines
		sp := shSpec(t, 2, "", &out)
		sp.Socket = d.path
		sp.Command = []string{torchPython, "-c", `import os, socket, stat
p = os.environ["SCAV_SOCKET"]
s = socket.socket(socket.AF_UNIX)
s.connect(p)
f = s.makefile("rw")
def say(m):
    f.write(m + "\n")
    f.flush()
    return f.readline().strip()
a = say(f"hello from rank {os.environ['RANK']} on {socket.gethostname()}")
b = say("bye")
s.shutdown(socket.SHUT_WR)
rest = f.read()
print(a, "|", b, "|", repr(rest), "|", oct(stat.S_IMODE(os.stat(os.path.dirname(p)).st_mode)), "|", p, flush=True)
`}
		h, err := l.Start(ctx, sp)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		res, err := h.Wait(ctx)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Wait = %+v, %v; output %q %q", res, err, out.of(0), out.of(1))
		}
		var paths []string
		for r := range 2 {
			got := out.of(r)
			hello := fmt.Sprintf("hello from rank %d on %s", r, tn.Hosts[r].Name)
			// The daemon's answers came back on the same connection, and
			// the worker's EOF reached the daemon, which closed its side.
			prefix := "stdout: ack " + hello + " | ack bye | '' | 0o700 | "
			if len(got) != 1 || !strings.HasPrefix(got[0], prefix) {
				t.Fatalf("rank %d wrote %q, want %q...", r, got, prefix)
			}
			p := strings.TrimPrefix(got[0], prefix)
			if p == d.path || !strings.HasPrefix(p, "/tmp/scav-") {
				t.Errorf("rank %d: SCAV_SOCKET %q, want a forwarded socket under /tmp", r, p)
			}
			paths = append(paths, p)
			// The hosts share this filesystem: the directory is gone.
			if _, err := os.Stat(filepath.Dir(p)); !os.IsNotExist(err) {
				t.Errorf("rank %d: %s remains after the attempt: %v", r, filepath.Dir(p), err)
			}
		}
		if paths[0] == paths[1] {
			t.Errorf("both hosts use %s", paths[0])
		}
		// Wait returned, so the forwarders' goroutines were joined.
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, f := range []string{"ssh.(*forwarder)", "ssh.copyHalf"} {
			if strings.Contains(stacks, f) {
				t.Errorf("a goroutine in %s runs after Wait:\n%s", f, stacks)
			}
		}
		want := []string{
			"hello from rank 0 on " + tn.Hosts[0].Name, "bye", "EOF",
			"hello from rank 1 on " + tn.Hosts[1].Name, "bye", "EOF",
		}
		if got := d.received(); !reflect.DeepEqual(got, want) {
			t.Errorf("the daemon socket received %q, want %q", got, want)
		}
	})

	t.Run("HostFailureOverGRPC", func(t *testing.T) {
		ctx := testCtx(t, 60*time.Second)
		// The log tells when the keepalive gave up on the host.
		obsCore, logs := observer.New(zap.ErrorLevel)
		sl := newLauncher(t, zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), obsCore)))
		// Through real gRPC, as an external plugin is reached: the loss must
		// arrive in the Result.
		client, _ := plugin.TestPluginGRPCConn(t, false, goplugin.PluginSet(sl, zap.NewNop()))
		t.Cleanup(func() { _ = client.Close() })
		raw, err := client.Dispense(goplugin.PluginName)
		if err != nil {
			t.Fatalf("Dispense: %v", err)
		}
		l := raw.(plugins.Launcher)
		var out lines
		sp := torchSpec(t, 2, 0, &out)
		sp.Command = append(sp.Command, "hang")
		sp.Socket = newTestDaemon(t).path
		h, err := l.Start(ctx, sp)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		out.await(t, 0, rankLine(0, 2, 0, 2), 30*time.Second)
		out.await(t, 1, rankLine(1, 2, 1, 2), 5*time.Second)

		if err := tn.LinkDown(1); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		res, err := h.Wait(ctx)
		took := time.Since(begin)
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
		lostLogs := logs.FilterMessage("host lost").All()
		if len(lostLogs) != 1 {
			t.Fatalf("%d \"host lost\" log entries, want 1: %v", len(lostLogs), logs.All())
		}
		detected := lostLogs[0].Time.Sub(begin)
		t.Logf("link down -> host lost: %v (keepalive every 250ms, answer within 1s); -> Wait returned: %v",
			detected.Round(time.Millisecond), took.Round(time.Millisecond))
		// Interval + timeout, with slack for a loaded machine.
		if detected > 2*time.Second {
			t.Errorf("the loss was detected %v after the link went down", detected)
		}
		if !reflect.DeepEqual(res.LostHosts, []string{tn.Hosts[1].Addr}) || res.FailedRank != 1 || res.ExitCode != 255 ||
			!res.Ranks[0].Stopped || res.Ranks[0].Signal != "SIGTERM" {
			t.Errorf("Result = %+v, want host 2 lost, rank 1 failed (255), rank 0 stopped by SIGTERM", res)
		}
		// Plus the peers' stop and the cleanup.
		if took > 4*time.Second {
			t.Errorf("the attempt took %v to end after the link went down", took)
		}
		// Rank 1 still runs, cut off, on host 2, and the directory of its
		// forwarded socket is still there.
		ps := jobProcs(tn, 1, sp.JobID)
		if len(ps) == 0 {
			t.Fatalf("rank 1 is not running on host 2 while it is cut off")
		}
		forwardDir := filepath.Dir(ps[0].Getenv(plugins.EnvSocket))
		if _, err := os.Stat(forwardDir); err != nil || !strings.HasPrefix(forwardDir, "/tmp/scav-") {
			t.Errorf("the forward directory %q of host 2: %v", forwardDir, err)
		}
		if jobProcs(tn, 0, sp.JobID) != nil {
			t.Errorf("processes of the attempt left on host 1: %v", jobProcs(tn, 0, sp.JobID))
		}

		begin = time.Now()
		caps, err := l.Capabilities(ctx)
		if err != nil || caps.MaxWorkers != 1 || !reflect.DeepEqual(caps.Hosts, []string{tn.Hosts[0].Addr}) {
			t.Fatalf("Capabilities = %+v, %v; want host 1 only", caps, err)
		}
		t.Logf("Capabilities with host 2 down took %v", time.Since(begin).Round(time.Millisecond))

		// The relaunch on the host that remains, with one worker.
		var out2 lines
		sp2 := torchSpec(t, 1, 150, &out2)
		sp2.Attempt = 2
		h2, err := l.Start(ctx, sp2)
		if err != nil {
			t.Fatalf("Start of the relaunch: %v", err)
		}
		out2.await(t, 0, rankLine(0, 1, 0, 1), 30*time.Second)
		var running bool
		for _, p := range jobProcs(tn, 0, sp2.JobID) {
			running = running || p.Getenv(plugins.EnvAttempt) == "2" && p.Getenv(plugins.EnvRank) == "0"
		}
		if !running {
			t.Errorf("the relaunched worker does not run on host 1: %v", jobProcs(tn, 0, sp2.JobID))
		}
		res2, err := h2.Wait(ctx)
		if err != nil || res2.ExitCode != 0 || len(res2.Ranks) != 1 || len(res2.LostHosts) != 0 {
			t.Fatalf("relaunch: Wait = %+v, %v; output %q", res2, err, out2.of(0))
		}

		// Host 2 answers again: the launcher kills what the lost attempt
		// left there before it offers the host.
		if err := tn.LinkUp(1); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			caps, err = l.Capabilities(ctx)
			if err == nil && caps.MaxWorkers == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Capabilities = %+v, %v after host 2 came back; want both hosts", caps, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !reflect.DeepEqual(caps.Hosts, []string{tn.Hosts[0].Addr, tn.Hosts[1].Addr}) {
			t.Errorf("Capabilities.Hosts = %q", caps.Hosts)
		}
		// The probe that found host 2 back killed the group synchronously.
		if ps := jobProcs(tn, 1, sp.JobID); ps != nil {
			t.Errorf("the cut-off rank still runs on host 2 once it answers again: %v; its output %q", ps, out.of(1))
		}
		if ps := jobProcs(tn, 0, sp.JobID); ps != nil {
			t.Errorf("processes of the job left on host 1: %v", ps)
		}
		if _, err := os.Stat(forwardDir); !os.IsNotExist(err) {
			t.Errorf("the forward directory %s of host 2 remains once it answers again: %v", forwardDir, err)
		}
	})
}

// jobProcs lists the live processes of job on host i.
func jobProcs(tn *testnet.Net, i int, job string) []testnet.Proc {
	var out []testnet.Proc
	for _, p := range tn.Procs(i) {
		if p.State != "Z" && p.Getenv(plugins.EnvJobID) == job {
			out = append(out, p)
		}
	}
	return out
}

// testDaemon stands in for scavd's telemetry socket: a real unix socket
// that records every line it reads ("EOF" when a connection ends) and
// answers each with "ack <line>".
type testDaemon struct {
	path string
	mu   sync.Mutex
	got  map[string][]string // by the first line of the connection
}

func newTestDaemon(t *testing.T) *testDaemon {
	d := &testDaemon{path: filepath.Join(t.TempDir(), "scavd.sock"), got: map[string][]string{}}
	ln, err := net.Listen("unix", d.path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns sync.Map
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			wg.Go(func() {
				defer c.Close()
				var key string
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if key == "" {
						key = sc.Text()
					}
					d.mu.Lock()
					d.got[key] = append(d.got[key], sc.Text())
					d.mu.Unlock()
					if _, err := fmt.Fprintf(c, "ack %s\n", sc.Text()); err != nil {
						return
					}
				}
				d.mu.Lock()
				d.got[key] = append(d.got[key], "EOF")
				d.mu.Unlock()
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		conns.Range(func(c, _ any) bool { _ = c.(net.Conn).Close(); return true })
		wg.Wait()
	})
	return d
}

// received returns the lines of every connection, in the order of their first lines.
func (d *testDaemon) received() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var keys []string
	for k := range d.got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		out = append(out, d.got[k]...)
	}
	return out
}
