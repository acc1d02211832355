package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testnats"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/scavenger-ml/scavenger/internal/testdir"
	"github.com/scavenger-ml/scavenger/internal/testproc"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// scavdBinary builds scavd once for the tests that run it as a process.
func scavdBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "scavd-bin-"); buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(buildDir, "scavd"), ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build scavd: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "scavd")
}

// TestReloadAppliesLogLevelAndNamesTheRest drives one reloader through a
// good change, a change that needs a restart and a bad file.
func TestReloadAppliesLogLevelAndNamesTheRest(t *testing.T) {
	path := writeConfig(t, "log_level: info\nlisten: 127.0.0.1:0\n")
	l := loader{path: path, flags: map[string][]string{"node": {"n1"}}}
	cfg, err := l.load()
	if err != nil {
		t.Fatal(err)
	}
	level := zap.NewAtomicLevelAt(zapcore.InfoLevel)
	core, logs := observer.New(zapcore.DebugLevel)
	live := &fakeDaemon{}
	r := &reloader{loader: l, current: cfg.settings, level: level, daemon: live, log: zap.New(core)}
	ctx := t.Context()

	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The flag --node n1 still wins over the file's node.
	write("log_level: debug\nlisten: 127.0.0.1:4999\nnode: other\nstep_retention: 2h\n")
	if err := r.reload(ctx); err != nil {
		t.Fatal(err)
	}
	if level.Level() != zapcore.DebugLevel {
		t.Errorf("level %s after reload, want debug", level.Level())
	}
	if live.retention.StepMaxAge != 2*time.Hour || r.current.StepRetention != 2*time.Hour {
		t.Errorf("retention %v after reload, want 2h", live.retention)
	}
	if e := logs.FilterMessage("config changes wait for a restart").All(); len(e) != 1 || fmt.Sprint(e[0].ContextMap()["keys"]) != "[listen]" {
		t.Errorf("restart-pending log: %+v", e)
	}
	if e := logs.FilterMessage("config reloaded").All(); len(e) != 1 || fmt.Sprint(e[0].ContextMap()["applied"]) != "[step_retention log_level]" {
		t.Errorf("reloaded log: %+v", e)
	}

	// A bad file changes nothing.
	write("log_level: warn\nbogus: 1\n")
	if err := r.reload(ctx); err == nil || !strings.Contains(err.Error(), path+`:2: unknown key "bogus"`) {
		t.Fatalf("reload of a bad file: %v", err)
	}
	if level.Level() != zapcore.DebugLevel || r.current.LogLevel != "debug" {
		t.Errorf("a bad file changed the level to %s", level.Level())
	}
	// A key that fails to apply keeps its running value; the others apply.
	live.err = errors.New("stream update refused")
	write("log_level: info\nlisten: 127.0.0.1:4999\nstep_retention: 3h\n")
	if err := r.reload(ctx); err == nil || !strings.Contains(err.Error(), "step_retention: stream update refused") {
		t.Fatalf("reload with a failing key: %v", err)
	}
	if level.Level() != zapcore.InfoLevel || r.current.StepRetention != 2*time.Hour {
		t.Errorf("level %s, retention %s", level.Level(), r.current.StepRetention)
	}
	live.err = nil
	// The running listen address is still what runs, so it is still pending.
	write("log_level: error\nlisten: 127.0.0.1:4999\nstep_retention: 2h\n")
	if err := r.reload(ctx); err != nil {
		t.Fatal(err)
	}
	if level.Level() != zapcore.ErrorLevel || len(logs.FilterMessage("config changes wait for a restart").All()) != 3 {
		t.Errorf("level %s; restart-pending logs %d", level.Level(), len(logs.FilterMessage("config changes wait for a restart").All()))
	}
}

// fakeDaemon records what a reload changes.
type fakeDaemon struct {
	retention history.Retention
	err       error
}

func (f *fakeDaemon) SetRetention(_ context.Context, r history.Retention) error {
	if f.err != nil {
		return f.err
	}
	f.retention = r
	return nil
}

// TestEveryReloadableKeyApplies: reloadable names only keys apply knows.
func TestEveryReloadableKeyApplies(t *testing.T) {
	r := &reloader{level: zap.NewAtomicLevel(), daemon: &fakeDaemon{}}
	for key := range reloadable {
		if err := r.apply(t.Context(), key, defaultSettings()); err != nil {
			t.Errorf("reloadable key %s: %v", key, err)
		}
	}
	if err := r.apply(t.Context(), "listen", defaultSettings()); err == nil {
		t.Error("listen applied live")
	}
}

// notifySocket is a real unixgram socket standing in for systemd's.
type notifySocket struct {
	path string
	msgs chan string
}

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	dir := testdir.Short(t, "sdn-") // short: sun_path is 108 bytes
	n := &notifySocket{path: filepath.Join(dir, "notify"), msgs: make(chan string, 1000)}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			n.msgs <- string(buf[:k])
		}
	}()
	return n
}

// expect returns the next datagram that contains want; others are skipped.
func (n *notifySocket) expect(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m := <-n.msgs:
			if strings.Contains(m, want) {
				return m
			}
		case <-timeout:
			t.Fatalf("no notification with %q", want)
		}
	}
}

// logWatcher collects a process's stderr and waits for lines in it.
type logWatcher struct {
	mu    sync.Mutex
	lines []string
}

func (w *logWatcher) read(r io.Reader) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		w.mu.Lock()
		w.lines = append(w.lines, s.Text())
		w.mu.Unlock()
	}
}

// wait returns the first line, from the from'th on, that contains all of want.
func (w *logWatcher) wait(t *testing.T, from int, want ...string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		for i := from; i < len(w.lines); i++ {
			ok := true
			for _, s := range want {
				ok = ok && strings.Contains(w.lines[i], s)
			}
			if ok {
				w.mu.Unlock()
				return i
			}
		}
		w.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Fatalf("no log line with %q in:\n%s", want, strings.Join(w.lines, "\n"))
	return 0
}

// TestServiceLifecycle runs the scavd binary as systemd would: a config
// file, NOTIFY_SOCKET and WATCHDOG_USEC; it must say READY=1, ping the
// watchdog, reload on a real SIGHUP (and survive a bad file), and say
// STOPPING=1 and exit 0 on SIGTERM.
func TestServiceLifecycle(t *testing.T) {
	bin := scavdBinary(t)
	state := testdir.Short(t, "scavd-svc-")
	config := writeConfig(t, fmt.Sprintf("state_dir: %s\nlisten: 127.0.0.1:0\nlog_level: info\nlog_format: json\n", state))
	notify := listenNotify(t)

	cmd := exec.Command(bin, "--config", config)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify.path, "WATCHDOG_USEC=400000")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	testproc.Start(t, cmd)
	var logs logWatcher
	copied := make(chan struct{})
	go func() { defer close(copied); logs.read(stderr) }()

	notify.expect(t, "READY=1")
	notify.expect(t, "WATCHDOG=1")
	i := logs.wait(t, 0, "scavd ready")

	// A live change (log_level) and one that waits for a restart (listen).
	if err := os.WriteFile(config, []byte(fmt.Sprintf("state_dir: %s\nlisten: 127.0.0.1:1\nlog_level: debug\nlog_format: json\nstep_retention: 2h\n", state)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if m := notify.expect(t, "RELOADING=1"); !strings.Contains(m, "MONOTONIC_USEC=") {
		t.Errorf("reloading message %q", m)
	}
	notify.expect(t, "READY=1")
	i = logs.wait(t, i, "config reloaded", `"applied":["step_retention","log_level"]`, `"log_level":"debug"`)
	logs.wait(t, i, "config changes wait for a restart", `"keys":["listen"]`)
	// The step stream keeps 2h now.
	info, err := api.ReadDiscovery(state)
	if err != nil {
		t.Fatal(err)
	}
	nc := testnats.Connect(t, info.NATS, filepath.Join(state, "nats.nk"))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), telemetry.StepStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxAge; got != 2*time.Hour {
		t.Errorf("step stream keeps %s after the reload, want 2h", got)
	}

	// A bad file is refused; the daemon runs on.
	if err := os.WriteFile(config, []byte("log_level: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	logs.wait(t, i, "config reload failed; the running config stays", "did not find expected node content")
	notify.expect(t, "READY=1")
	notify.expect(t, "WATCHDOG=1")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	notify.expect(t, "STOPPING=1")
	<-copied
	if err := cmd.Wait(); err != nil {
		t.Fatalf("scavd exited with %v", err)
	}
}

// TestCheckConfigExitStatus runs scavd --check-config: 0 and the settings
// on stdout for a good file, 1 and every problem on stderr for a bad one.
func TestCheckConfigExitStatus(t *testing.T) {
	bin := scavdBinary(t)
	good := writeConfig(t, "log_level: warn\n")
	out, err := exec.Command(bin, "--config", good, "--check-config").Output()
	if err != nil || !bytes.Contains(out, []byte("log_level: warn # "+good+":1")) {
		t.Fatalf("good file: %v\n%s", err, out)
	}
	bad := writeConfig(t, "log_level: loud\nlisten: x\n")
	cmd := exec.Command(bin, "--config", bad, "--check-config")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("bad file: exit %v", err)
	}
	for _, want := range []string{"2 problems", bad + `:1: log_level: "loud"`, bad + `:2: listen: "x" is not host:port`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
		}
	}
}

// TestSystemdUnitVerifies runs systemd-analyze verify on
// deploy/systemd/scavd.service, with ExecStart pointed at a freshly built
// scavd (verify insists that the binary exists), and checks the directives
// scavd's service integration relies on.
func TestSystemdUnitVerifies(t *testing.T) {
	src := filepath.Join("..", "..", "deploy", "systemd", "scavd.service")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{
		"Type=notify\n", "NotifyAccess=main\n", "WatchdogSec=", "Restart=on-failure\n", "KillMode=mixed\n",
		"ExecReload=/bin/kill -HUP $MAINPID\n", "StateDirectory=scavenger\n",
		"ExecStart=/usr/local/bin/scavd --config " + DefaultConfigFile + "\n",
		"ExecReload=/usr/local/bin/scavd --config " + DefaultConfigFile + " --check-config\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("%s lacks %q", src, strings.TrimSpace(want))
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the unit is not verified")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "scavd.service")
	unit = strings.ReplaceAll(unit, "=/usr/local/bin/scavd ", "="+scavdBinary(t)+" ")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("scavd.service")) {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", src, err, out)
	}
}

// TestRestartResumesJobs restarts the scavd binary the way systemctl
// restart does (SIGTERM, wait, start): the job it ran checkpoints, stops,
// and the new process resumes it from that checkpoint.
func TestRestartResumesJobs(t *testing.T) {
	bin := scavdBinary(t)
	state := testdir.Short(t, "scavd-rs-")
	work := t.TempDir()
	config := writeConfig(t, fmt.Sprintf("state_dir: %s\nlisten: 127.0.0.1:0\nlog_format: json\n", state))
	start := func() (*exec.Cmd, *api.Client) {
		t.Helper()
		notify := listenNotify(t)
		cmd := exec.Command(bin, "--config", config)
		cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify.path)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil { // stop it as systemd would, so that it stops its job
				_ = cmd.Process.Signal(syscall.SIGTERM)
				done := make(chan struct{})
				go func() { _ = cmd.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(20 * time.Second):
					_ = cmd.Process.Kill()
					<-done
				}
			}
			if t.Failed() {
				t.Logf("scavd pid %d stderr:\n%s", cmd.Process.Pid, stderr.String())
			}
		})
		notify.expect(t, "READY=1")
		info, err := api.ReadDiscovery(state)
		if err != nil {
			t.Fatal(err)
		}
		c, err := api.Dial(t.Context(), info.API, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return cmd, c
	}
	script := `echo "restore=${SCAV_RESTORE:-none}" > attempt-$SCAV_ATTEMPT
if [ -z "$SCAV_RESTORE" ]; then
  printf x > "$SCAV_CHECKPOINT_DIR/ckpt-5"
  printf '{"format":"scavenger.manifest/1","checkpoint":"ckpt-5","step":5,"size":1}' > "$SCAV_CHECKPOINT_DIR/latest.json"
fi
trap 'exit 0' TERM
sleep 60 & wait`

	first, c1 := start()
	j, err := c1.Run(t.Context(), api.RunRequest{Command: []string{"/bin/sh", "-c", script}, Dir: work,
		Env: []string{"PATH=" + os.Getenv("PATH")}, Config: plugins.Config{Workers: 1}, Grace: api.Duration(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(j.CheckpointDir, "latest.json")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint")
		}
	}
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first scavd: %v", err)
	}

	_, c2 := start()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := c2.Job(t.Context(), j.ID)
		if err == nil && got.State == api.StateRunning && got.Attempt == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job not resumed: %+v, %v", got, err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(work, "attempt-2"))
		if strings.Contains(string(b), "restore="+filepath.Join(j.CheckpointDir, "ckpt-5")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second attempt wrote %q", b)
		}
	}
}
