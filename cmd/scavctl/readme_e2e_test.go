package main

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
)

// readmeBlock is a fenced code block of README.md.
type readmeBlock struct {
	section string // the "## " heading it is under
	lang    string // its info string: sh, console, python, ...
	text    string // its lines, the indentation of a list item removed
}

// readmeBlocks returns README.md's fenced code blocks in order.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []readmeBlock
	var cur *readmeBlock
	var lines []string
	section, indent := "", ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case cur == nil && strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur, indent, lines = &readmeBlock{section: section, lang: strings.TrimPrefix(trimmed, "```")}, line[:len(line)-len(trimmed)], nil
		case cur != nil && strings.HasPrefix(trimmed, "```"):
			cur.text = strings.Join(lines, "\n") + "\n"
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			lines = append(lines, strings.TrimPrefix(line, indent))
		}
	}
	return blocks
}

// readmeSectionBlocks returns the blocks of README.md's section "## section".
func readmeSectionBlocks(t *testing.T, section string) []readmeBlock {
	t.Helper()
	var in []readmeBlock
	for _, b := range readmeBlocks(t) {
		if b.section == section {
			in = append(in, b)
		}
	}
	if len(in) == 0 {
		t.Fatalf("README.md: no code blocks in %q", "## "+section)
	}
	return in
}

// readmeCommand is one command of a README block and the output README
// shows for it.
type readmeCommand struct {
	line, shown string
}

// commands splits a block into its commands: in a console block the lines
// after "$ " (with the lines up to the next one as what they print), in an
// sh block every line; a trailing backslash continues a line, and a "  # "
// comment is dropped.
func (b readmeBlock) commands() []readmeCommand {
	var cmds []readmeCommand
	cont := false
	for _, line := range strings.Split(strings.TrimSuffix(b.text, "\n"), "\n") {
		if b.lang == "console" && !cont {
			cmd, ok := strings.CutPrefix(line, "$ ")
			if !ok {
				if len(cmds) > 0 {
					cmds[len(cmds)-1].shown += line + "\n"
				}
				continue
			}
			line = cmd
		}
		if i := strings.Index(line, "  # "); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		switch {
		case cont:
			cmds[len(cmds)-1].line += " " + strings.TrimSuffix(line, "\\")
		case line != "":
			cmds = append(cmds, readmeCommand{line: strings.TrimSuffix(line, "\\")})
		}
		cont = strings.HasSuffix(line, "\\")
	}
	return cmds
}

// readmeJobRe finds job ids (name-hex) in README's and scavctl's output.
var readmeJobRe = regexp.MustCompile(`\b[a-z][a-z0-9_]*-[0-9a-f]{6}\b`)

// readmeShell runs README commands as a user would from a clone: in a
// directory that has the repository's examples, traces and python, with the
// built scavctl and scavd first on PATH and a state directory of the test's.
type readmeShell struct {
	t          *testing.T
	env        []string
	cwd, state string
	ids        map[string]string // README's job id -> the one this run made
	bg         []*exec.Cmd       // commands put in the background with "&"
}

// freshCheckout copies the repository's working tree — every file git
// tracks or would (git ls-files -co --exclude-standard) — into a new
// directory, as a clone has it, with the test's scavd and scavctl in its
// bin/ as `make build` leaves them.
func freshCheckout(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("git", "-C", repoRoot, "ls-files", "-co", "--exclude-standard", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if st, err := os.Lstat(filepath.Join(repoRoot, f)); err == nil && st.Mode().IsRegular() {
			copyFile(t, filepath.Join(repoRoot, f), filepath.Join(dir, f), nil)
		}
	}
	copyFile(t, scavdBinary(t), filepath.Join(dir, "bin", "scavd"), nil)
	copyFile(t, scavctlBin, filepath.Join(dir, "bin", "scavctl"), nil)
	return dir
}

// newReadmeShell is a shell in checkout, with its bin/ first on PATH (as
// README's `export PATH=$PWD/bin:$PATH`) and a state directory of its own.
func newReadmeShell(t *testing.T, checkout string) *readmeShell {
	t.Helper()
	state := stateDir(t)
	s := &readmeShell{t: t, cwd: checkout, state: state, ids: map[string]string{}, env: append(os.Environ(),
		"PATH="+filepath.Join(checkout, "bin")+":"+os.Getenv("PATH"), "SCAV_STATE_DIR="+state, "STATE_DIRECTORY="+state, "SCAV_API=", "OMP_NUM_THREADS=1")}
	t.Cleanup(s.stopBackground)
	return s
}

// run runs one README command and fails the test unless it exits 0. The
// only changes: python is the test's, job ids are this run's, and a scavd
// listens on free ports. "&" puts a command in the background, "kill %N"
// stops the Nth with SIGTERM.
func (s *readmeShell) run(c readmeCommand) {
	t := s.t
	line := strings.ReplaceAll(c.line, "/usr/bin/python3", pythonBin)
	line = readmeJobRe.ReplaceAllStringFunc(line, func(id string) string {
		if real := s.ids[id]; real != "" {
			return real
		}
		return id
	})
	line = regexp.MustCompile(`(^|nohup )scavd\b`).ReplaceAllString(line, "${1}scavd --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0")
	if n, ok := strings.CutPrefix(line, "kill %"); ok {
		i := int(n[0] - '1')
		if i < 0 || i >= len(s.bg) {
			t.Fatalf("README: %q: no such background command", c.line)
		}
		_ = s.bg[i].Process.Signal(syscall.SIGTERM)
		_ = s.bg[i].Wait()
		return
	}
	if bgLine, ok := strings.CutSuffix(line, "&"); ok {
		cmd := exec.Command("/bin/sh", "-c", "exec "+bgLine)
		cmd.Dir, cmd.Env = s.cwd, s.env
		if err := cmd.Start(); err != nil {
			t.Fatalf("README: %s: %v", c.line, err)
		}
		s.bg = append(s.bg, cmd)
		s.awaitDaemon()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", line)
	cmd.Dir, cmd.Env = s.cwd, s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README: %s\n(run as %s): %v\n%s", c.line, line, err, out)
	}
	t.Logf("$ %s\n%s", line, out)
	// The README's ids in what it shows name, in order, the ids this run printed.
	shown, got := readmeJobRe.FindAllString(c.shown, -1), readmeJobRe.FindAllString(string(out), -1)
	for i := 0; i < len(shown) && i < len(got); i++ {
		if s.ids[shown[i]] == "" {
			s.ids[shown[i]] = got[i]
		}
	}
}

// awaitDaemon waits until a scavd answers on the shell's state directory.
func (s *readmeShell) awaitDaemon() {
	sock := filepath.Join(s.state, "api.sock")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("README: the scavd put in the background did not answer on %s in 30s", sock)
		}
	}
}

// stopBackground stops what the README left running.
func (s *readmeShell) stopBackground() {
	for _, cmd := range s.bg {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	}
}

// finalLossRe finds the loss an example's summary line ends with.
var finalLossRe = regexp.MustCompile(`"(?:final_loss|last_loss)": (-?[0-9.eE+-]+|NaN|-?Infinity)`)

// checkLosses is checkFiniteLosses of the shell's state directory.
func (s *readmeShell) checkLosses() int { return checkFiniteLosses(s.t, s.state) }

// checkFiniteLosses checks that every job of state succeeded, with a final
// loss (its last summary line's) that is a finite number; it returns how
// many jobs it saw.
func checkFiniteLosses(t *testing.T, state string) int {
	t.Helper()
	js := jsonLines[[]api.Job](t, state, "jobs", "-o", "json")
	if len(js) != 1 {
		t.Fatalf("scavctl jobs -o json: %v", js)
	}
	for _, j := range js[0] {
		if j.State != api.StateSucceeded {
			t.Errorf("job %s ended %s: %s", j.ID, j.State, j.Message)
			continue
		}
		var last string
		for _, l := range logLines(t, state, j.ID) {
			if strings.Contains(l.Line, `"event": "summary"`) {
				last = l.Line
			}
		}
		m := finalLossRe.FindStringSubmatch(last)
		if m == nil {
			t.Errorf("job %s (%s): no summary with a final loss in its output (last: %q)", j.ID, strings.Join(j.Command, " "), last)
			continue
		}
		if v, err := strconv.ParseFloat(m[1], 64); err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			t.Errorf("job %s (%s) trained to a final loss of %s: want a finite number\n%s", j.ID, strings.Join(j.Command, " "), m[1], last)
		}
	}
	return len(js[0])
}

// runPython runs a python block of README.md with python in the shell's
// directory, and fails the test unless it exits 0.
func (s *readmeShell) runPython(python, code string) {
	t := s.t
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", strings.ReplaceAll(code, "/usr/bin/python3", pythonBin))
	cmd.Dir, cmd.Env = s.cwd, s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README's python:\n%s\n(with %s): %v\n%s", code, python, err, out)
	}
	t.Logf(">>> %s\n%s", code, out)
}

// TestReadmeRunsAsWritten runs README.md's blocks on a fresh checkout (a
// copy of the working tree, with the test's binaries in bin/), each in
// order and as written but for the python (SCAV_TEST_PYTHON), this run's job
// ids and a scavd on free ports: the python client's install (a venv that
// the python API then runs in), the console sessions (the first job, the
// jobs in the background), the python API with a scavd in the background as
// that section starts one, and the commands of the optimizer and "moving"
// sections. Every command must exit 0, and every job they ran must end well
// with a finite final loss. The Slurm section's blocks run, through `make
// slurm-dev`'s script, in TestSlurmReadmeBatchScript.
func TestReadmeRunsAsWritten(t *testing.T) {
	needTorch(t)
	checkout := freshCheckout(t)
	var pip, python []readmeBlock
	var blocks []readmeBlock
	for _, b := range readmeBlocks(t) {
		switch {
		case b.lang == "sh" && strings.Contains(b.text, "pip install ./python"):
			pip = append(pip, b)
		case b.lang == "python" && strings.Contains(b.text, "scavenger.run("):
			python = append(python, b)
		case b.lang == "console" || b.lang == "sh" && (b.section == "The optimizer, on measured GPU traces" || b.section == "Letting Scavenger move the job"):
			blocks = append(blocks, b)
		}
	}
	if len(pip) != 1 || len(python) != 1 || len(blocks) < 4 {
		t.Fatalf("README.md: %d install blocks, %d python API blocks, %d runnable blocks; want 1, 1 and the session, the background jobs, the optimizer and the move", len(pip), len(python), len(blocks))
	}
	t.Run("pip", func(t *testing.T) {
		s := newReadmeShell(t, checkout)
		for _, c := range pip[0].commands() {
			s.run(c)
		}
	})
	venvPython := filepath.Join(checkout, ".venv", "bin", "python")
	for _, b := range blocks {
		t.Run(strings.ReplaceAll(b.section, " ", "_"), func(t *testing.T) {
			s := newReadmeShell(t, checkout)
			for _, c := range b.commands() {
				s.run(c)
			}
			s.stopBackground()
			if b.section != "The optimizer, on measured GPU traces" && s.checkLosses() == 0 {
				t.Errorf("README's %q session ran no job", b.section)
			}
		})
	}
	t.Run("python_API", func(t *testing.T) {
		if _, err := os.Stat(venvPython); err != nil {
			t.Skipf("no venv from the install block: %v", err)
		}
		s := newReadmeShell(t, checkout)
		s.run(readmeCommand{line: "nohup scavd >scavd.log 2>&1 &"}) // as "Jobs in the background" starts it
		s.runPython(venvPython, python[0].text)
		s.stopBackground()
		if s.checkLosses() != 1 {
			t.Errorf("the python API block ran no job")
		}
	})
}
