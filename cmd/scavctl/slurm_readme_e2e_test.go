package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testslurm"
)

// readmeSlurmBlock returns the block of README.md's Slurm section that
// contains marker.
func readmeSlurmBlock(t *testing.T, marker string) string {
	t.Helper()
	blocks := readmeSectionBlocks(t, "Running on Slurm")
	var all []string
	for _, b := range blocks {
		if strings.Contains(b.Text, marker) {
			return b.Text
		}
		all = append(all, b.Text)
	}
	t.Fatalf("README.md: no block of the Slurm section contains %q:\n%s", marker, strings.Join(all, "\n"))
	return ""
}

// hookInstall is deploy/slurm installed into a private cluster as README.md
// says, with the test's directories in place of the system's.
type hookInstall struct {
	bin    string // in place of /usr/local/bin: holds the installed scavctl
	logDir string // in place of /var/log/scavenger
}

// installHooksAsReadme runs README.md's hook install lines, unchanged but for
// the system paths — /etc/slurm/ is the cluster's directory, /usr/local/bin/
// and /var/log/scavenger are the test's — in a copy of the repository's
// bin/scavctl and deploy/slurm/ whose files carry the same substitution (and
// extra, old-new pairs, too): so the hooks and slurm.conf lines are those of
// deploy/slurm, with these paths.
func installHooksAsReadme(t *testing.T, c *testslurm.Cluster, extra ...string) hookInstall {
	t.Helper()
	tmp := t.TempDir()
	h := hookInstall{bin: filepath.Join(tmp, "usr-local-bin"), logDir: filepath.Join(tmp, "log")}
	if err := os.Mkdir(h.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	paths := strings.NewReplacer(append([]string{"/etc/slurm/", c.Dir + "/", "/usr/local/bin/", h.bin + "/",
		"/var/log/scavenger", h.logDir}, extra...)...)
	checkout := filepath.Join(tmp, "checkout")
	copyFile(t, scavctlBin, filepath.Join(checkout, "bin", "scavctl"), nil)
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "slurm", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("deploy/slurm: %v %v", files, err)
	}
	for _, f := range files {
		copyFile(t, f, filepath.Join(checkout, "deploy", "slurm", filepath.Base(f)), paths)
	}
	block := paths.Replace(readmeSlurmBlock(t, "slurm.conf.scavenger"))
	sh := exec.Command("/bin/sh", "-e", "-c", block)
	sh.Dir, sh.Env = checkout, os.Environ() // SLURM_CONF: the cluster's (Cluster.Setenv)
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("README's hook install:\n%s\n%v\n%s", block, err, out)
	}
	return h
}

// copyFile copies src to dst (making its directory) with src's mode,
// replacing text with r when r is not nil.
func copyFile(t *testing.T, src, dst string, r *strings.Replacer) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	if r != nil {
		data = []byte(r.Replace(string(data)))
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, st.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}

// sbatch submits script from dir with env added to the test's environment
// and returns the Slurm job id; its output goes to out.
func sbatch(t *testing.T, dir, out string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sbatch", append([]string{"--parsable", "--output=" + out}, args...)...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch %v: %v\n%s", args, err, b)
	}
	return strings.TrimSpace(strings.Split(string(b), ";")[0])
}

// slurmJobEnd polls until Slurm job id has ended and returns its
// `scontrol show job` fields (JobState, ExitCode, Reason, ...).
func slurmJobEnd(t *testing.T, c *testslurm.Cluster, id, out string, d time.Duration) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
	defer cancel()
	for deadline := time.Now().Add(d); ; time.Sleep(300 * time.Millisecond) {
		s, err := c.Run(ctx, "scontrol", "show", "job", "-o", id)
		f := map[string]string{}
		for _, kv := range strings.Fields(s) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				f[k] = v
			}
		}
		switch f["JobState"] {
		case "", "PENDING", "CONFIGURING", "RUNNING", "COMPLETING":
		default:
			return f
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(out)
			t.Fatalf("Slurm job %s did not end in %s (%v): %v\n%s\n%s", id, d, err, f, b, c.Logs())
		}
	}
}

// nodeState returns the node's state as `scontrol show node` reports it
// (IDLE, IDLE+DRAIN, ...) and its Reason.
func nodeState(t *testing.T, c *testslurm.Cluster) (state, reason string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.Run(ctx, "scontrol", "show", "node", "-o", c.Node)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(kv, "State="); ok {
			state = v
		}
	}
	if _, r, ok := strings.Cut(out, " Reason="); ok {
		reason = r
	}
	return state, reason
}

// awaitFile polls until the file at path holds every one of want.
func awaitFile(t *testing.T, path string, d time.Duration, want ...string) string {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		b, _ := os.ReadFile(path)
		missing := ""
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s lacks %q after %s:\n%s", path, missing, d, b)
		}
	}
}

// TestSlurmReadmeBatchScript starts a one-node Slurm as `make slurm-dev`
// does (deploy/slurm/dev-cluster.sh, with a directory and ports of the
// test's), installs deploy/slurm into it by README.md's lines and submits
// README.md's batch script, as its
// text stands but for the python (SCAV_TEST_PYTHON, /usr/bin/python3 by
// default), from the repository root with the installed scavctl first on
// PATH: the script's `scavctl run` starts its own scavd, moves the job within
// its ranges as the scavenger policy decides, runs every attempt as a step of
// the allocation and meets its target with a finite final loss; the hooks
// log the allocation.
func TestSlurmReadmeBatchScript(t *testing.T) {
	needTorch(t)
	state := stateDir(t)
	c := testslurm.StartScript(t, filepath.Join(repoRoot, "deploy", "slurm", "dev-cluster.sh"))
	c.Setenv(t)
	h := installHooksAsReadme(t, c)

	dir := t.TempDir()
	script := readmeSlurmBlock(t, "#SBATCH")
	if !strings.Contains(script, "/usr/bin/python3") {
		t.Fatalf("README's batch script does not name /usr/bin/python3:\n%s", script)
	}
	script = strings.ReplaceAll(script, "/usr/bin/python3", pythonBin)
	if err := os.WriteFile(filepath.Join(dir, "job.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	alloc := sbatch(t, repoRoot, out, []string{"PATH=" + h.bin + ":" + os.Getenv("PATH"), "SCAV_STATE_DIR=" + state,
		"SCAV_API=", "OMP_NUM_THREADS=1"}, filepath.Join(dir, "job.sh"))
	f := slurmJobEnd(t, c, alloc, out, 3*time.Minute)
	b, _ := os.ReadFile(out)
	if f["JobState"] != "COMPLETED" || f["ExitCode"] != "0:0" {
		t.Fatalf("README's batch script as Slurm job %s: %s, exit %s; want COMPLETED, 0:0\n%s", alloc, f["JobState"], f["ExitCode"], b)
	}
	js := jsonLines[[]api.Job](t, state, "jobs", "-o", "json")
	if len(js) != 1 || len(js[0]) != 1 {
		t.Fatalf("jobs %+v: want the one of the batch script\n%s", js, b)
	}
	j := js[0][0]
	if j.State != api.StateSucceeded || j.Launcher != "slurm" || j.Optimize.Policy != "scavenger" {
		t.Fatalf("job %+v: want succeeded, slurm launcher, scavenger policy\n%s", j, b)
	}
	for _, a := range j.Attempts {
		if step, ok := strings.CutPrefix(a.Handle, alloc+"."); !ok || step == "" {
			t.Errorf("attempt %d ran as %q, not as a step of allocation %s", a.Attempt, a.Handle, alloc)
		}
	}
	recs := steps(t, state, j.ID)
	last := checkEveryStepOnce(t, recs)
	var samples int64
	for _, r := range recs {
		if r.Rank == 0 {
			samples += int64(r.GlobalBatch)
		}
	}
	if target := int64(300 * 32); samples < target || samples >= target+256 {
		t.Errorf("%d samples in %d steps, want the README's target, 300 steps of 32 (within one batch)", samples, last)
	}
	checkFiniteLosses(t, state)
	log := awaitFile(t, filepath.Join(h.logDir, "slurm-hooks.log"), 20*time.Second,
		"slurm prolog job "+alloc+":", "slurm epilog job "+alloc+":")
	if st, reason := nodeState(t, c); st != "IDLE" {
		t.Errorf("node %s after the job: %s (%s), want IDLE", c.Node, st, reason)
	}
	t.Logf("job %s: %d attempts, %d steps; hook log:\n%s", j.ID, len(j.Attempts), last, log)
}

// syslogSink listens on a unix datagram socket, as syslogd on /dev/log, and
// collects what it receives until the test ends.
type syslogSink struct {
	path string
	mu   sync.Mutex
	msgs []string
}

func newSyslogSink(t *testing.T) *syslogSink {
	t.Helper()
	s := &syslogSink{path: filepath.Join(t.TempDir(), "log")}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 8192)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.msgs = append(s.msgs, string(buf[:n]))
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = conn.Close(); <-done })
	return s
}

// await polls until a message holds every one of want and returns it.
func (s *syslogSink) await(t *testing.T, d time.Duration, want ...string) string {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		s.mu.Lock()
		msgs := append([]string(nil), s.msgs...)
		s.mu.Unlock()
		for _, m := range msgs {
			all := true
			for _, w := range want {
				all = all && strings.Contains(m, w)
			}
			if all {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("syslog: no message with %q in %s:\n%s", want, d, strings.Join(msgs, "\n"))
		}
	}
}

// TestSlurmHooksFailOpenWithoutScavctl installs the hooks as README.md says,
// then takes scavctl away (and puts back a copy that is not executable): the
// prolog and epilog exit 0, say why in syslog and the hook log, every job
// runs and the node is not drained — where `exec`ing a missing scavctl exits
// 127 and drains it.
func TestSlurmHooksFailOpenWithoutScavctl(t *testing.T) {
	c := testslurm.Start(t, testslurm.Options{CPUs: 8})
	c.Setenv(t)
	sink := newSyslogSink(t)
	// The installed scripts' syslog socket is the test's (the system's is
	// /dev/log, absent here); nothing else differs from deploy/slurm.
	h := installHooksAsReadme(t, c, "${SCAVENGER_SYSLOG_SOCKET:-}", "${SCAVENGER_SYSLOG_SOCKET:-"+sink.path+"}")
	bin := filepath.Join(h.bin, "scavctl")
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		spoil func() error
	}{
		{"missing", func() error { return os.Remove(bin) }},
		{"not executable", func() error { return os.WriteFile(bin, []byte("#!/bin/sh\nexit 1\n"), 0o644) }},
	} {
		if err := tc.spoil(); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".out")
		id := sbatch(t, dir, out, nil, "--wrap", "echo ran as job $SLURM_JOB_ID")
		f := slurmJobEnd(t, c, id, out, time.Minute)
		if b, _ := os.ReadFile(out); f["JobState"] != "COMPLETED" || f["ExitCode"] != "0:0" || !strings.Contains(string(b), "ran as job "+id) {
			t.Fatalf("scavctl %s: job %s %s, exit %s, reason %s, output %q; want it run and COMPLETED, 0:0",
				tc.name, id, f["JobState"], f["ExitCode"], f["Reason"], b)
		}
		why := bin + " is missing or not executable"
		for _, hook := range []string{"prolog", "epilog"} {
			sink.await(t, 20*time.Second, "scavenger-"+hook+": job "+id+": "+why)
			awaitFile(t, filepath.Join(h.logDir, "slurm-hooks.log"), 20*time.Second, "slurm "+hook+" job "+id+": "+why)
		}
		if st, reason := nodeState(t, c); st != "IDLE" {
			t.Fatalf("scavctl %s: node %s is %s (%s), want IDLE: a failing hook drained it", tc.name, c.Node, st, reason)
		}
	}
}

// TestSlurmHookByItsName: deploy/slurm/scavenger-hook.sh is the prolog or
// the epilog by the name it is installed as; under another name it does
// nothing but say so, and exits 0 all the same.
func TestSlurmHookByItsName(t *testing.T) {
	dir, logDir := t.TempDir(), t.TempDir()
	for name, want := range map[string]string{
		"scavenger-prolog.sh": "slurm prolog job 7: ",
		"scavenger-epilog.sh": "slurm epilog job 7: ",
		"hook.sh":             "slurm hook job 7: installed as",
	} {
		path := filepath.Join(dir, name)
		copyFile(t, filepath.Join(repoRoot, "deploy", "slurm", "scavenger-hook.sh"), path, nil)
		cmd := exec.Command(path)
		cmd.Env = append(os.Environ(), "SLURM_JOB_ID=7", "SCAVCTL="+filepath.Join(dir, "no-scavctl"),
			"SCAVENGER_LOG_DIR="+logDir, "SCAVENGER_SYSLOG_SOCKET="+filepath.Join(dir, "no-syslog"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %v, want exit 0 (fail open)\n%s", name, err, out)
		}
		awaitFile(t, filepath.Join(logDir, "slurm-hooks.log"), 5*time.Second, want)
	}
}
