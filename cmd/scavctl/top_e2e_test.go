package main

// End-to-end tests of `scavctl top` and `scavctl report --format`: the real
// binary against a real in-process scavd running real PyTorch workers; top
// runs in a detached tmux session of 80×24.

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/internal/subreaper"
	"github.com/scavenger-ml/scavenger/internal/syncbuf"
	"github.com/scavenger-ml/scavenger/report"
	"github.com/scavenger-ml/scavenger/report/reporttest"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// tmuxServer is a tmux server of its own (its own socket), killed at cleanup.
type tmuxServer struct {
	t      *testing.T
	socket string
}

func newTmux(t *testing.T) *tmuxServer {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed: the headless test of scavctl top needs it (apt-get install tmux)")
	}
	s := &tmuxServer{t: t, socket: filepath.Join(t.TempDir(), "tmux.sock")}
	t.Cleanup(func() {
		_, _ = s.run("kill-server")
		// Nothing is left: the server answers no more.
		if out, err := s.run("list-sessions"); err == nil {
			t.Errorf("tmux server still there after kill-server:\n%s", out)
		}
	})
	return s
}

func (s *tmuxServer) run(args ...string) (string, error) {
	cmd := exec.Command("tmux", append([]string{"-S", s.socket}, args...)...)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (s *tmuxServer) must(args ...string) string {
	s.t.Helper()
	out, err := s.run(args...)
	if err != nil {
		s.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return out
}

// waitPane polls the pane until ok accepts its text.
func (s *tmuxServer) waitPane(target string, within time.Duration, ok func(string) bool) string {
	s.t.Helper()
	var screen string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		screen = s.must("capture-pane", "-p", "-t", target)
		if ok(screen) {
			return screen
		}
	}
	s.t.Fatalf("the pane did not show what was expected within %s; it shows:\n%s", within, screen)
	return ""
}

func TestTopUnderTmuxShowsARunningJob(t *testing.T) {
	needTorch(t)
	if err := subreaper.Become(); err != nil { // the workers of the run killed below come here
		t.Fatal(err)
	}
	tm := newTmux(t)
	state := stateDir(t)
	run, _, errOut := startJob(t, state, "--name", "topped", "--workers", "2", "--batch-size", "64",
		"--target-steps", "100000", "--", pythonBin, "examples/resumable_cnn.py")
	id := waitForRecords(t, state, errOut, 2*20)

	exitFile := filepath.Join(t.TempDir(), "exit")
	// The shell outlives top so that the pane can be read after it quits
	// (a dead pane reports no cursor); the tmux server's cleanup ends it.
	shell := fmt.Sprintf("%s --state-dir %s top --interval 300ms; echo $? > %s; sleep 120", scavctlBin, state, exitFile)
	tm.must("new-session", "-d", "-s", "top", "-x", "80", "-y", "24", "sh", "-c", shell)
	node := thisNode(t)
	screen := tm.waitPane("top", 30*time.Second, func(s string) bool {
		return jobRowShown(s, id) && nodeLineShown(s, node)
	})
	lines := strings.Split(strings.TrimRight(screen, "\n"), "\n")
	if len(lines) > 24 || !strings.HasPrefix(lines[0], "scavenger top") || !strings.HasPrefix(lines[1], "NODE") {
		t.Errorf("the frame is not a title, the nodes and the jobs within 24 lines:\n%s", screen)
	}
	for i, l := range lines {
		if len([]rune(l)) > 80 {
			t.Errorf("line %d is wider than 80: %q", i, l)
		}
	}
	t.Logf("scavctl top at 80x24:\n%s", screen)

	tm.must("send-keys", "-t", "top", "q")
	var code []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		if code, err = os.ReadFile(exitFile); err == nil && len(code) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scavctl top did not quit on q within 10s:\n%s", tm.must("capture-pane", "-p", "-t", "top"))
		}
	}
	if c := strings.TrimSpace(string(code)); c != "0" {
		t.Errorf("scavctl top exited %s after q, want 0", c)
	}
	// The terminal is given back: the main screen, without the frame, and
	// the cursor shown.
	after := tm.must("capture-pane", "-p", "-t", "top")
	if strings.Contains(after, "scavenger top") {
		t.Errorf("the frame is still on the screen after quitting:\n%s", after)
	}
	if cur := strings.TrimSpace(tm.must("display-message", "-p", "-t", "top", "#{cursor_flag}")); cur != "1" {
		t.Errorf("cursor flag %q after quitting: the cursor is still hidden", cur)
	}

	// --once prints one plain frame with the job's row.
	out, e, rc := scavctl(t, state, "top", "--once")
	if rc != 0 || !strings.Contains(out, id) || !nodeLineShown(out, node) || strings.Contains(out, "\x1b") {
		t.Errorf("top --once: exit %d, want a plain frame with %s and node %s:\n%s%s", rc, id, node, out, e)
	}

	// When the daemon goes (the run holding it is killed), a plain top says
	// since when, shows the job's state as unknown, and ends with exit 75.
	top := exec.Command(scavctlBin, "--state-dir", state, "top", "--interval", "200ms")
	var topOut, topErr syncbuf.Buffer
	top.Stdout, top.Stderr = &topOut, &topErr
	if err := top.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !jobRowShown(topOut.String(), id); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("plain top showed no row of %s within 20s:\n%s%s", id, topOut.String(), topErr.String())
		}
	}
	_ = run.Process.Kill()
	_ = run.Wait()
	topDone := make(chan error, 1)
	go func() { topDone <- top.Wait() }()
	select {
	case <-topDone:
	case <-time.After(daemonLostAfter + 20*time.Second):
		_ = top.Process.Kill()
		<-topDone
		t.Fatalf("top did not end within %s of its daemon going:\n%s", daemonLostAfter+20*time.Second, topOut.String())
	}
	frames := strings.Split(topOut.String(), "\n\n")
	last := frames[len(frames)-1]
	if code := top.ProcessState.ExitCode(); code != exitDaemonLost || !strings.Contains(topErr.String(), "has been gone since") {
		t.Errorf("top ended %d, stderr %q; want %d and that scavd has been gone", code, topErr.String(), exitDaemonLost)
	}
	if !strings.Contains(last, "is gone since") || !jobRowShown(last, id) || !strings.Contains(last, "unknown") {
		t.Errorf("top's last frame does not say the daemon is gone and the job's state unknown:\n%s", last)
	}
	subreaper.ReapOrphans()
}

// thisNode is the name this machine's daemon samples the node under, as
// top's node column shows it at 80 columns.
func thisNode(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	name := []rune(telemetry.SubjectNode(h))
	if len(name) > 22 {
		name = append(name[:21], '+') // cut as top cuts a cell
	}
	return string(name)
}

// jobRowShown reports whether screen shows job id's row, with its
// configuration (2x64) and a step.
func jobRowShown(screen, id string) bool {
	for _, l := range strings.Split(screen, "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 && f[0] == id && f[2] == "2x64" && f[3] != "-" {
			return true
		}
	}
	return false
}

// nodeLineShown reports whether screen shows node's line from a host and a
// GPU sample: CPU busy of its CPUs, memory, and its GPUs or "no GPUs".
func nodeLineShown(screen, node string) bool {
	for _, l := range strings.Split(screen, "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 && f[0] == node && strings.Contains(f[1], "%/") && strings.Contains(f[3], "/") &&
			(strings.Contains(l, " no GPUs ") || strings.Contains(l, " GPU")) {
			return true
		}
	}
	return false
}

func TestReportFormatsOnARealOptimisedJob(t *testing.T) {
	needTorch(t)
	state := stateDir(t)
	const target = 3000 // steps at the starting batch: enough for the search to pay
	out, errOut, code := scavctl(t, state, "run", "--workers", "1:2", "--batch-size", "32:256", "--policy", "scavenger", "--price", "2.5",
		"--target-steps", strconv.Itoa(target), "--", pythonBin, "examples/resumable_cnn.py")
	if code != 0 {
		t.Fatalf("scavctl run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	id := jobID(t, errOut)

	// JSON: the old fields, and the candidates of a model-based decision.
	jout, e, code := scavctl(t, state, "report", id, "-o", "json")
	if code != 0 {
		t.Fatalf("report -o json: exit %d\n%s", code, e)
	}
	var rep report.JobReport
	if err := json.Unmarshal([]byte(jout), &rep); err != nil {
		t.Fatalf("report -o json: %v\n%s", err, jout)
	}
	chosen := 0
	for _, c := range rep.Candidates {
		if c.Chosen {
			chosen++
		}
		if !(c.TotalS > 0) || !(c.TotalUSD > 0) || !(c.StepS > 0) {
			t.Errorf("candidate %+v: want a positive forecast", c)
		}
	}
	if len(rep.Candidates) < 2 || chosen != 1 {
		t.Fatalf("%d candidates, %d chosen: want the optimizer's candidates with the chosen one marked\n%s\n%s", len(rep.Candidates), chosen, jout, errOut)
	}
	if len(rep.Noise) == 0 || len(rep.Cost) < 2 || len(rep.Timeline) < 2 {
		t.Errorf("series: %d noise, %d cost points, %d attempts", len(rep.Noise), len(rep.Cost), len(rep.Timeline))
	}
	if jf, _, _ := scavctl(t, state, "report", id, "--format", "json"); jf != jout {
		t.Error("--format json and -o json differ")
	}

	// Text stays the default.
	text, _, code := scavctl(t, state, "report", id)
	if code != 0 || !strings.HasPrefix(text, "Job "+id) || !strings.Contains(text, "Total:") {
		t.Errorf("report: exit %d:\n%s", code, text)
	}

	dir := t.TempDir()
	html := filepath.Join(dir, "r.html")
	svg := filepath.Join(dir, "r.svg")
	pngf := filepath.Join(dir, "r.png")
	figs := filepath.Join(dir, "figs") + "/"
	for _, args := range [][]string{
		{"--format", "html", "--out", html},
		{"--format", "svg", "--out", svg},
		{"--format", "png", "--out", pngf},
		{"--format", "svg", "--out", figs},
	} {
		if _, e, code := scavctl(t, state, append([]string{"report", id}, args...)...); code != 0 {
			t.Fatalf("report %v: exit %d\n%s", args, code, e)
		}
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	reporttest.CheckHTML(t, string(page), 8)
	parseSVGFile(t, svg)
	f, err := os.Open(pngf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil || img.Bounds().Dx() < 100 {
		t.Fatalf("%s: %v", pngf, err)
	}
	for _, name := range []string{"timeline", "steptime", "throughput", "loss", "noise", "cost", "finish", "pareto", "report"} {
		parseSVGFile(t, filepath.Join(figs, id+"-"+name+".svg"))
	}
	t.Logf("report of %s: %d attempts, %d decisions, %d candidates; html %d bytes", id, len(rep.Timeline), rep.Decisions, len(rep.Candidates), len(page))
}

// parseSVGFile parses the SVG document at path whole.
func parseSVGFile(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s does not parse as XML: %v", path, err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("%s: root element %q, want svg", path, root)
	}
}
