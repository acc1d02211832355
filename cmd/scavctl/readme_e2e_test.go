package main

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/readme"
)

// readmeBlocks returns README.md's fenced code blocks in order.
func readmeBlocks(t *testing.T) []readme.Block {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return readme.Blocks(data)
}

// readmeSectionBlocks returns the blocks of README.md's section "## section".
func readmeSectionBlocks(t *testing.T, section string) []readme.Block {
	t.Helper()
	var in []readme.Block
	for _, b := range readmeBlocks(t) {
		if b.Section == section {
			in = append(in, b)
		}
	}
	if len(in) == 0 {
		t.Fatalf("README.md: no code blocks in %q", "## "+section)
	}
	return in
}

// readmeShell is a readme.Shell of the test: a command that does not exit
// 0 fails it.
type readmeShell struct {
	t     *testing.T
	state string
	sh    *readme.Shell
}

// freshCheckout copies the repository's working tree into a new directory
// (readme.Checkout), with the test's scavd and scavctl in its bin/ as
// `make build` leaves them.
func freshCheckout(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := readme.Checkout(repoRoot, dir); err != nil {
		t.Fatal(err)
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
	s := &readmeShell{t: t, state: state, sh: &readme.Shell{Dir: checkout, State: state, Python: pythonBin, Env: append(os.Environ(),
		"PATH="+filepath.Join(checkout, "bin")+":"+os.Getenv("PATH"), "SCAV_STATE_DIR="+state, "STATE_DIRECTORY="+state, "SCAV_API=", "OMP_NUM_THREADS=1")}}
	t.Cleanup(s.sh.Stop)
	return s
}

// run runs one README command and fails the test unless it exits 0.
func (s *readmeShell) run(c readme.Command) {
	s.t.Helper()
	r, err := s.sh.Run(c)
	if err != nil {
		s.t.Fatalf("README: %v\n%s", err, r.Output)
	}
	s.t.Logf("$ %s\n%s", r.Line, r.Output)
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
	cmd.Dir, cmd.Env = s.sh.Dir, s.sh.Env
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
	var pip, python, blocks []readme.Block
	for _, b := range readmeBlocks(t) {
		switch {
		case b.PythonAPI():
			python = append(python, b)
		case b.Runnable() && strings.Contains(b.Text, "pip install ./python"):
			pip = append(pip, b)
		case b.Runnable():
			blocks = append(blocks, b)
		}
	}
	if len(pip) != 1 || len(python) != 1 || len(blocks) < 4 {
		t.Fatalf("README.md: %d install blocks, %d python API blocks, %d runnable blocks; want 1, 1 and the session, the background jobs, the optimizer and the move", len(pip), len(python), len(blocks))
	}
	t.Run("pip", func(t *testing.T) {
		s := newReadmeShell(t, checkout)
		for _, c := range pip[0].Commands() {
			s.run(c)
		}
	})
	venvPython := filepath.Join(checkout, ".venv", "bin", "python")
	for _, b := range blocks {
		t.Run(strings.ReplaceAll(b.Section, " ", "_"), func(t *testing.T) {
			s := newReadmeShell(t, checkout)
			for _, c := range b.Commands() {
				s.run(c)
			}
			s.sh.Stop()
			if b.Section != "The optimizer, on measured GPU traces" && s.checkLosses() == 0 {
				t.Errorf("README's %q session ran no job", b.Section)
			}
		})
	}
	t.Run("python_API", func(t *testing.T) {
		if _, err := os.Stat(venvPython); err != nil {
			t.Skipf("no venv from the install block: %v", err)
		}
		s := newReadmeShell(t, checkout)
		s.run(readme.Command{Line: "nohup scavd >scavd.log 2>&1 &"}) // as "Jobs in the background" starts it
		s.runPython(venvPython, python[0].Text)
		s.sh.Stop()
		if s.checkLosses() != 1 {
			t.Errorf("the python API block ran no job")
		}
	})
}
