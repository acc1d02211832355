// Command walkthrough walks through README.md as a new user would, on a
// fresh checkout of the repository (its working tree, copied as a clone
// has it), and writes docs/walkthrough.md: every command README.md gives to
// run as it stands, in README's order, with the time it took and what came
// of it, and each job's end and final loss. The blocks that need root, a
// cluster or systemd are named with the test that runs them instead.
// `make walkthrough` runs it; it exits 1 when a command failed.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/internal/readme"
)

func main() {
	repo := flag.String("repo", ".", "the repository to walk through")
	out := flag.String("out", "docs/walkthrough.md", "where to write the walk")
	python := flag.String("python", "/usr/bin/python3", "the python with torch (README's /usr/bin/python3)")
	flag.Parse()
	w, err := walk(*repo, *python)
	if err == nil {
		err = os.WriteFile(*out, []byte(w.markdown()), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "walkthrough:", err)
		os.Exit(1)
	}
	fmt.Printf("walkthrough: %s written; %d commands, %d failed\n", *out, w.commands, w.failed)
	if w.failed > 0 {
		os.Exit(1)
	}
}

// step is one command of the walk and what came of it.
type step struct {
	line    string
	took    time.Duration
	code    int
	outcome string
}

// section is the walk through one README section.
type section struct {
	title, note string
	steps       []step
	jobs        []string // each job's end, in words
}

// walkthrough is the whole walk.
type walkthrough struct {
	commit, checkout string
	sections         []*section
	commands, failed int
	took             time.Duration
}

// notRun are the sections whose blocks need what a new user's machine may
// not have, with what runs them instead.
var notRun = map[string]string{
	"The two commands":             "`make demo` and `make test` need root for apt; `make build` below is what the rest needs. `make test` is the whole suite (CI runs it).",
	"Run scavd as a service":       "needs systemd as PID 1: `TestSystemdForReal` (cmd/scavd) boots a Debian under systemd-nspawn and runs these lines there.",
	"Running on Slurm":             "needs root and a Slurm: `make slurm-dev` makes one; `TestSlurmReadmeBatchScript` runs this section's lines on it.",
	"Running over SSH":             "needs SSH hosts: `go test ./cmd/scavctl -run SSH` runs them in network namespaces.",
	"Cloud machines":               "needs root (the local cloud): `go test ./cmd/scavctl -run Cloud` runs it.",
	"Launcher plugins":             "a recipe for a launcher of your own: `plugins/conformance` is its test.",
	"Many nodes, one NATS cluster": "needs several nodes: `go test ./cmd/scavctl -run ClusterOfThree` runs three.",
}

func walk(repo, python string) (*walkthrough, error) {
	start := time.Now()
	repo, err := filepath.Abs(repo)
	if err != nil {
		return nil, err
	}
	w := &walkthrough{}
	if b, err := exec.Command("git", "-C", repo, "describe", "--always", "--dirty").Output(); err == nil {
		w.commit = strings.TrimSpace(string(b))
	}
	data, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "walkthrough-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	w.checkout = filepath.Join(tmp, "scavenger")
	if err := readme.Checkout(repo, w.checkout); err != nil {
		return nil, err
	}
	shell := func() *readme.Shell {
		state, _ := os.MkdirTemp(tmp, "state-")
		return &readme.Shell{Dir: w.checkout, State: state, Python: python, Timeout: 15 * time.Minute, Env: append(os.Environ(),
			"PATH="+filepath.Join(w.checkout, "bin")+":"+os.Getenv("PATH"), "SCAV_STATE_DIR="+state, "STATE_DIRECTORY="+state, "SCAV_API=", "OMP_NUM_THREADS=1")}
	}
	build := &section{title: "Building (`make build`, then `export PATH=$PWD/bin:$PATH`)"}
	w.run(build, shell(), readme.Command{Line: "make build"})
	w.sections = append(w.sections, build)

	blocks := readme.Blocks(data)
	var install readme.Block
	for _, b := range blocks {
		if b.Runnable() && strings.Contains(b.Text, "pip install ./python") {
			install = b
		}
	}
	installed := false
	bySection := map[string]*section{}
	for _, b := range blocks {
		s := bySection[b.Section]
		if s == nil {
			s = &section{title: b.Section, note: notRun[b.Section]}
			bySection[b.Section] = s
			w.sections = append(w.sections, s)
		}
		switch {
		case b.PythonAPI():
			if !installed { // README says: installed as in "The python client" below
				s.note = "The python client is installed first, as its section below says."
				w.block(s, install, shell())
				installed = true
			}
			sh := shell()
			w.run(s, sh, readme.Command{Line: "nohup scavd >scavd.log 2>&1 &"})
			code := filepath.Join(tmp, "api.py")
			_ = os.WriteFile(code, []byte(strings.ReplaceAll(b.Text, "/usr/bin/python3", python)), 0o644)
			w.run(s, sh, readme.Command{Line: ".venv/bin/python " + code + "  # README's python API example"})
			sh.Stop()
			s.jobs = append(s.jobs, jobEnds(sh)...)
		case b.Runnable() && strings.Contains(b.Text, "pip install ./python"):
			if !installed {
				w.block(s, b, shell())
				installed = true
			}
		case b.Runnable():
			w.block(s, b, shell())
		}
	}
	w.took = time.Since(start)
	return w, nil
}

// block runs every command of b in sh, then records the jobs' ends.
func (w *walkthrough) block(s *section, b readme.Block, sh *readme.Shell) {
	for _, c := range b.Commands() {
		w.run(s, sh, c)
	}
	sh.Stop()
	s.jobs = append(s.jobs, jobEnds(sh)...)
}

// run runs one command and records it.
func (w *walkthrough) run(s *section, sh *readme.Shell, c readme.Command) {
	r, err := sh.Run(c)
	w.commands++
	st := step{line: c.Line, took: r.Took, code: r.Code, outcome: w.outcome(r.Output)}
	if err != nil {
		w.failed++
		st.outcome = "FAILED: " + w.tidy(err.Error()) + " " + st.outcome
	}
	fmt.Fprintf(os.Stderr, "walkthrough: %s (%s, exit %d)\n", c.Line, r.Took.Round(100*time.Millisecond), r.Code)
	s.steps = append(s.steps, st)
}

// finalLossRe finds the loss an example's summary line ends with.
var finalLossRe = regexp.MustCompile(`"(?:final_loss|last_loss)": (-?[0-9.eE+-]+|NaN|-?Infinity)`)

// jobEnds says how each job of the shell's state directory ended, and its
// final loss.
func jobEnds(sh *readme.Shell) []string {
	scavctl := func(args ...string) []byte {
		cmd := exec.Command("scavctl", append([]string{"--state-dir", sh.State}, args...)...)
		cmd.Dir, cmd.Env, cmd.Stderr = sh.Dir, sh.Env, io.Discard
		out, _ := cmd.Output()
		return out
	}
	var jobs []struct {
		ID, State, Message string
		Attempts           []json.RawMessage
	}
	if err := json.Unmarshal(scavctl("jobs", "-o", "json"), &jobs); err != nil {
		return []string{"the jobs could not be read: " + err.Error()}
	}
	var out []string
	for _, j := range jobs {
		loss := "no final loss printed"
		for _, line := range strings.Split(string(scavctl("logs", j.ID)), "\n") {
			if m := finalLossRe.FindStringSubmatch(line); m != nil {
				loss = "final loss " + m[1]
			}
		}
		out = append(out, fmt.Sprintf("%s: %s in %d attempt(s), %s", j.ID, j.State, len(j.Attempts), loss))
	}
	return out
}

// outcome is what a command printed, in short: its last lines.
func (w *walkthrough) outcome(out []byte) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return "(nothing printed)"
	}
	if len(lines) > 2 {
		lines = lines[len(lines)-2:]
	}
	s := w.tidy(strings.Join(lines, " / "))
	if len(s) > 220 {
		s = s[:217] + "..."
	}
	return s
}

// tidy writes paths of the walk's own short.
func (w *walkthrough) tidy(s string) string {
	s = strings.ReplaceAll(s, w.checkout, ".")
	return regexp.MustCompile(`/tmp/walkthrough-[0-9]+/state-[0-9]+`).ReplaceAllString(s, "$STATE")
}

func (w *walkthrough) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# A new user's walk through README.md\n\n")
	fmt.Fprintf(&b, "Generated by `make walkthrough` (tools/walkthrough) on %d cores, %s, from a fresh checkout of %s (the working tree, copied as a clone has it). "+
		"Every command README.md gives to run as it stands, in its order, with the time it took and what came of it: its exit status and the last lines it printed. "+
		"The only changes: job ids are this run's, and a scavd listens on free ports (this machine runs others). "+
		"Each section runs with a state directory of its own ($STATE, given to scavctl and scavd as SCAV_STATE_DIR and STATE_DIRECTORY: as root both would otherwise use the system's, /var/lib/scavenger).\n\n", runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"), w.commit)
	verdict := "met no failure"
	if w.failed > 0 {
		verdict = fmt.Sprintf("**%d failed**", w.failed)
	}
	fmt.Fprintf(&b, "%d commands in %s: %s.\n", w.commands, w.took.Round(time.Second), verdict)
	for _, s := range w.sections {
		if len(s.steps) == 0 && s.note == "" {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n", s.title)
		if s.note != "" {
			fmt.Fprintf(&b, "%s\n\n", s.note)
		}
		if len(s.steps) > 0 {
			fmt.Fprintln(&b, "| command | time | outcome |")
			fmt.Fprintln(&b, "|---|---:|---|")
			for _, st := range s.steps {
				fmt.Fprintf(&b, "| `%s` | %s | exit %d: %s |\n", cell(st.line), st.took.Round(100*time.Millisecond), st.code, cell(st.outcome))
			}
		}
		if len(s.jobs) > 0 {
			fmt.Fprintln(&b)
			for _, j := range s.jobs {
				fmt.Fprintf(&b, "- job %s\n", j)
			}
		}
	}
	return b.String()
}

// cell makes s fit a table cell.
func cell(s string) string {
	return strings.NewReplacer("|", "\\|", "`", "'", "\n", " ").Replace(s)
}
