package readme

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// jobRe finds job ids (name-hex) in README's and scavctl's output.
var jobRe = regexp.MustCompile(`\b[a-z][a-z0-9_]*-[0-9a-f]{6}\b`)

// scavdRe finds a scavd started as a command (alone, or by nohup).
var scavdRe = regexp.MustCompile(`(^|nohup )scavd\b`)

// Shell runs README commands as a user would from a clone: in Dir, with
// Env (PATH with the built scavctl and scavd first, SCAV_STATE_DIR naming
// the state directory). The only changes to a command: /usr/bin/python3 is
// Python, README's job ids are this run's, and a scavd listens on free
// ports. "CMD &" puts a command in the background (and waits until a scavd
// answers on the state directory), "kill %N" stops the Nth with SIGTERM.
type Shell struct {
	Dir, State, Python string
	Env                []string
	// Timeout bounds one command (0: 5 minutes).
	Timeout time.Duration

	ids map[string]string // README's job id -> the one this run made
	bg  []*exec.Cmd
}

// Result is what one command did.
type Result struct {
	// Line is the command as it ran (the changes above made).
	Line   string
	Output []byte
	Took   time.Duration
	// Code is its exit status (-1: it did not run to an exit).
	Code int
}

// Run runs c; the error says why it did not exit 0.
func (s *Shell) Run(c Command) (Result, error) {
	if s.ids == nil {
		s.ids = map[string]string{}
	}
	line := c.Line
	if s.Python != "" {
		line = strings.ReplaceAll(line, "/usr/bin/python3", s.Python)
	}
	line = jobRe.ReplaceAllStringFunc(line, func(id string) string {
		if real := s.ids[id]; real != "" {
			return real
		}
		return id
	})
	line = scavdRe.ReplaceAllString(line, "${1}scavd --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0")
	r := Result{Line: line, Code: -1}
	start := time.Now()
	defer func() { r.Took = time.Since(start) }()
	if n, ok := strings.CutPrefix(line, "kill %"); ok {
		i := int(n[0] - '1')
		if i < 0 || i >= len(s.bg) {
			return r, fmt.Errorf("%q: no such background command", c.Line)
		}
		_ = s.bg[i].Process.Signal(syscall.SIGTERM)
		_ = s.bg[i].Wait()
		r.Code, r.Took = 0, time.Since(start)
		return r, nil
	}
	if bgLine, ok := strings.CutSuffix(line, "&"); ok {
		cmd := exec.Command("/bin/sh", "-c", "exec "+bgLine)
		cmd.Dir, cmd.Env = s.Dir, s.Env
		if err := cmd.Start(); err != nil {
			return r, fmt.Errorf("%s: %w", c.Line, err)
		}
		s.bg = append(s.bg, cmd)
		err := s.awaitDaemon()
		if err == nil {
			r.Code = 0
		}
		r.Took = time.Since(start)
		return r, err
	}
	d := s.Timeout
	if d <= 0 {
		d = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", line)
	cmd.Dir, cmd.Env = s.Dir, s.Env
	out, err := cmd.CombinedOutput()
	r.Output, r.Took = out, time.Since(start)
	if cmd.ProcessState != nil {
		r.Code = cmd.ProcessState.ExitCode()
	}
	// The README's ids in what it shows name, in order, the ids this run printed.
	shown, got := jobRe.FindAllString(c.Shown, -1), jobRe.FindAllString(string(out), -1)
	for i := 0; i < len(shown) && i < len(got); i++ {
		if s.ids[shown[i]] == "" {
			s.ids[shown[i]] = got[i]
		}
	}
	if err != nil {
		return r, fmt.Errorf("%s (run as %s): %w", c.Line, line, err)
	}
	return r, nil
}

// awaitDaemon waits until a scavd answers on the shell's state directory.
func (s *Shell) awaitDaemon() error {
	sock := filepath.Join(s.State, "api.sock")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the scavd put in the background did not answer on %s in 30s", sock)
		}
	}
}

// Stop stops what the commands left running in the background.
func (s *Shell) Stop() {
	for _, cmd := range s.bg {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	}
}

// Checkout copies the working tree of the repository at repo — every file
// git tracks or would (git ls-files -co --exclude-standard) — into dir, as
// a clone has it.
func Checkout(repo, dir string) error {
	out, err := exec.Command("git", "-C", repo, "ls-files", "-co", "--exclude-standard", "-z").Output()
	if err != nil {
		return fmt.Errorf("list the files of %s: %w", repo, err)
	}
	var errs []error
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if st, err := os.Lstat(filepath.Join(repo, f)); err == nil && st.Mode().IsRegular() {
			errs = append(errs, CopyFile(filepath.Join(repo, f), filepath.Join(dir, f)))
		}
	}
	return errors.Join(errs...)
}

// CopyFile copies src to dst, making dst's directory, with src's mode.
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}
