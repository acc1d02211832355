package main

// End-to-end tests: the real scavctl binary, its in-process scavd with an
// embedded nats-server, and real PyTorch DDP workers (gloo on CPU).

import (
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testdir"
	"github.com/scavenger-ml/scavenger/internal/testproc"
	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/report"
	"github.com/scavenger-ml/scavenger/stepstats"
	"github.com/scavenger-ml/scavenger/telemetry"
)

var (
	scavctlBin string
	pythonBin  = envOr("SCAV_TEST_PYTHON", "/usr/bin/python3")
	repoRoot   string
)

func TestMain(m *testing.M) {
	wd, _ := os.Getwd()
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	tmp, err := os.MkdirTemp("", "scavctl-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = os.Chmod(tmp, 0o755) // the user-isolation suite runs the binary as other users
	scavctlBin = filepath.Join(tmp, "scavctl")
	build := exec.Command("go", "build", "-o", scavctlBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build scavctl:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

func needTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command(pythonBin, "-c", "import torch").Run(); err != nil {
		t.Skipf("%s cannot import torch (run `make setup` as root): %v", pythonBin, err)
	}
}

// stateDir is a short private state directory (unix socket paths are short).
func stateDir(t *testing.T) string { return testdir.Short(t, "scav-") }

// scavctl runs the binary to completion and returns its output and exit code.
func scavctl(t *testing.T, state string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return scavctlEnv(t, state, nil, args...)
}

// scavctlEnv is scavctl with env added to the test's environment.
func scavctlEnv(t *testing.T, state string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(scavctlBin, append([]string{"--state-dir", state}, args...)...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("scavctl %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

var jobIDRe = regexp.MustCompile(`scavctl: job ([A-Za-z0-9_-]+):`)

func jobID(t *testing.T, stderr string) string {
	t.Helper()
	m := jobIDRe.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no job id in scavctl's output:\n%s", stderr)
	}
	return m[1]
}

// steps reads a job's step records back through `scavctl steps -o json`.
func steps(t *testing.T, state, id string) []telemetry.StepRecord {
	t.Helper()
	return jsonLines[telemetry.StepRecord](t, state, "steps", id, "-o", "json")
}

// jobRecord reads a job's record through `scavctl status -o json`.
func jobRecord(t *testing.T, state, id string) api.Job {
	t.Helper()
	var j struct {
		Job api.Job `json:"job"`
	}
	out, e, _ := scavctl(t, state, "status", id, "-o", "json")
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("status %s: %v\n%s%s", id, err, out, e)
	}
	return j.Job
}

// jsonLines runs a scavctl command that prints one JSON object per line and decodes them.
func jsonLines[T any](t *testing.T, state string, args ...string) []T {
	t.Helper()
	out, errOut, code := scavctl(t, state, args...)
	if code != 0 {
		t.Fatalf("scavctl %v: exit %d\n%s", args, code, errOut)
	}
	var vs []T
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var v T
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("scavctl %v: decode: %v", args, err)
		}
		vs = append(vs, v)
	}
	return vs
}

func TestRunCNNRecordsEveryStep(t *testing.T) {
	needTorch(t)
	const n, workers = 30, 2
	state := stateDir(t)
	// The job comes from a job file, whose flags and command a user gives
	// run with -f (the command line's --workers 2 wins over the file's 3).
	file := filepath.Join(t.TempDir(), "job.yaml")
	text := fmt.Sprintf("name: every-step\nworkers: 3\nbatch_size: 64\ncommand: [%s, examples/cnn.py, --steps, %d]\n", pythonBin, n)
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := scavctl(t, state, "run", "-f", file, "--workers", "2")
	if code != 0 {
		t.Fatalf("scavctl run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, `[0] {"event": "summary"`) {
		t.Errorf("rank 0's summary line is missing or not prefixed:\n%s", out)
	}
	id := jobID(t, errOut)
	if !strings.HasPrefix(id, "every-step-") {
		t.Errorf("job %s: want the job file's name every-step", id)
	}
	recs := steps(t, state, id)

	seen := map[[2]int64]int{}
	var local, avg float64
	for _, r := range recs {
		seen[[2]int64{int64(r.Rank), r.Step}]++
		if r.World != workers || r.GlobalBatch != 64 || r.LocalBatch != 32 {
			t.Fatalf("record %+v: want world 2, batch 64/32", r)
		}
		if r.LocalSqr == nil || r.AvgSqr == nil {
			t.Fatalf("record of rank %d step %d has no gradient norms", r.Rank, r.Step)
		}
		for _, v := range []float64{*r.LocalSqr, *r.AvgSqr} {
			if !(v > 0) || math.IsInf(v, 0) {
				t.Fatalf("rank %d step %d: gradient norm %v is not finite and positive", r.Rank, r.Step, v)
			}
		}
		local += *r.LocalSqr
		avg += *r.AvgSqr
	}
	for rank := int64(0); rank < workers; rank++ {
		for s := int64(1); s <= n; s++ {
			if c := seen[[2]int64{rank, s}]; c != 1 {
				t.Errorf("rank %d step %d recorded %d times, want once", rank, s, c)
			}
		}
	}
	if len(recs) != n*workers {
		t.Errorf("%d step records, want %d", len(recs), n*workers)
	}
	// The average of two independent noisy gradients has a smaller expected
	// squared norm than either: E|g_local|² = |G|² + tr Σ/b > |G|² + tr Σ/B.
	if !(local > avg) {
		t.Errorf("mean local squared norm %.4g <= mean averaged squared norm %.4g", local/float64(len(recs)), avg/float64(len(recs)))
	}
}

func TestRunUninstrumentedScriptUnchanged(t *testing.T) {
	needTorch(t)
	state := stateDir(t)
	out, errOut, code := scavctl(t, state, "run", "--workers", "2", "--batch-size", "32", "--",
		pythonBin, "examples/plain_ddp.py", "--steps", "10")
	if code != 0 {
		t.Fatalf("scavctl run plain_ddp.py: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, `"event": "summary"`) {
		t.Errorf("no summary from the plain script:\n%s", out)
	}
	if recs := steps(t, state, jobID(t, errOut)); len(recs) != 0 {
		t.Errorf("an uninstrumented script produced %d step records", len(recs))
	}
}

// pids reads the PIDs the ranks of testdata/ddp_loop.py wrote.
func pids(t *testing.T, dir string, n int) []int {
	t.Helper()
	var out []int
	for r := 0; r < n; r++ {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d.pid", r)))
		if err != nil {
			t.Fatalf("rank %d wrote no pid: %v", r, err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pid)
	}
	return out
}

// alive lists the pids that still exist, zombies included (a zombie means
// that nobody reaped the process, which this machine's PID 1 never will).
func alive(pids []int) []string {
	var left []string
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		left = append(left, fmt.Sprintf("%d(%s)", p, f[0]))
	}
	return left
}

func TestRankFailureEndsJobWithItsCode(t *testing.T) {
	needTorch(t)
	state, pidDir := stateDir(t), t.TempDir()
	out, errOut, code := scavctl(t, state, "run", "--workers", "2", "--grace", "3s", "--max-restarts", "0", "--env", "PID_DIR="+pidDir, "--",
		pythonBin, "cmd/scavctl/testdata/ddp_loop.py", "--fail-rank", "1", "--fail-after", "5", "--fail-code", "3")
	if code != 3 {
		t.Fatalf("scavctl exit %d, want the failing rank's 3\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "rank 1 exited with 3") {
		t.Errorf("scavctl did not say which rank failed:\n%s", errOut)
	}
	if left := alive(pids(t, pidDir, 2)); len(left) > 0 {
		t.Fatalf("worker processes left after the job ended: %v", left)
	}
}

// startLoop starts `scavctl run` on testdata/ddp_loop.py with 2 workers and
// returns once both ranks have written their pids.
func startLoop(t *testing.T, grace time.Duration, extra ...string) (*exec.Cmd, *bytes.Buffer, []int) {
	t.Helper()
	state, pidDir := stateDir(t), t.TempDir()
	args := append([]string{"--state-dir", state, "run", "--workers", "2", "--grace", grace.String(),
		"--env", "PID_DIR=" + pidDir, "--", pythonBin, "cmd/scavctl/testdata/ddp_loop.py"}, extra...)
	cmd := exec.Command(scavctlBin, args...)
	cmd.Dir = repoRoot
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	testproc.Start(t, cmd)
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err0 := os.Stat(filepath.Join(pidDir, "rank0.pid"))
		_, err1 := os.Stat(filepath.Join(pidDir, "rank1.pid"))
		if err0 == nil && err1 == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers did not start within 60s:\n%s", errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // let the pid files be written whole
	return cmd, &errOut, pids(t, pidDir, 2)
}

// waitGone waits until every worker has ended (and been reaped) and scavctl has exited.
func waitGone(t *testing.T, cmd *exec.Cmd, errOut *bytes.Buffer, workers []int, within time.Duration) time.Duration {
	t.Helper()
	sent := time.Now()
	for len(alive(workers)) > 0 {
		if time.Since(sent) > within {
			t.Fatalf("workers %v still there %s after the signal", alive(workers), time.Since(sent))
		}
		time.Sleep(10 * time.Millisecond)
	}
	gone := time.Since(sent)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("scavctl still running 10s after its workers ended:\n%s", errOut.String())
	}
	return gone
}

func TestInterruptStopsEveryWorkerWithinGrace(t *testing.T) {
	needTorch(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			const grace = 4 * time.Second
			cmd, errOut, workers := startLoop(t, grace)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			gone := waitGone(t, cmd, errOut, workers, grace+time.Second)
			if !strings.Contains(errOut.String(), "stopping job") {
				t.Errorf("scavctl did not say it was stopping the job:\n%s", errOut.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != 128+int(sig) {
				t.Errorf("scavctl exit %d after %s, want %d", code, sig, 128+int(sig))
			}
			t.Logf("workers gone %s after %s", gone, sig)
		})
	}
}

func TestSecondInterruptKillsStuckWorkersNow(t *testing.T) {
	needTorch(t)
	const grace = 60 * time.Second
	cmd, errOut, workers := startLoop(t, grace, "--ignore-term")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if left := alive(workers); len(left) != 2 {
		t.Fatalf("workers that ignore SIGTERM ended before the grace: %v left", left)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	gone := waitGone(t, cmd, errOut, workers, 5*time.Second)
	if !strings.Contains(errOut.String(), "killing job") {
		t.Errorf("scavctl did not say it was killing the job:\n%s", errOut.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("scavctl exit %d after two SIGINTs, want 130", code)
	}
	if j := jobRecord(t, cmd.Args[2], jobID(t, errOut.String())); !strings.Contains(j.Message, "killed on request at step") || *j.ExitCode != 137 {
		t.Errorf("record after the second SIGINT: %q, exit %d; want killed at a step, 137", j.Message, *j.ExitCode)
	}
	t.Logf("workers gone %s after the second SIGINT (grace was %s)", gone, grace)
}

// TestStoppedRunExitsNonZero: a job stopped from elsewhere ends its run
// with 143, so that `scavctl run ... && next` does not go on.
func TestStoppedRunExitsNonZero(t *testing.T) {
	needTorch(t)
	cmd, errOut, _ := startLoop(t, 4*time.Second)
	id := jobID(t, errOut.String())
	if _, e, code := scavctl(t, cmd.Args[2], "stop", id); code != 0 {
		t.Fatalf("stop %s: exit %d\n%s", id, code, e)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 143 || !strings.Contains(errOut.String(), "stopped on request") {
		t.Errorf("scavctl run of a job stopped by scavctl stop: exit %d, want 143:\n%s", code, errOut.String())
	}
}

func TestConcurrentRunsShareOneDaemon(t *testing.T) {
	state := stateDir(t)
	type res struct {
		out, errOut string
		code        int
	}
	results := make(chan res, 3)
	for i := 0; i < 3; i++ {
		go func() {
			cmd := exec.Command(scavctlBin, "--state-dir", state, "run", "--workers", "2", "--", "/bin/sh", "-c", "sleep 0.5; echo rank $RANK")
			var o, e bytes.Buffer
			cmd.Stdout, cmd.Stderr = &o, &e
			_ = cmd.Run()
			results <- res{o.String(), e.String(), cmd.ProcessState.ExitCode()}
		}()
	}
	for i := 0; i < 3; i++ {
		r := <-results
		if r.code != 0 || !strings.Contains(r.out, "[0] rank 0") || !strings.Contains(r.out, "[1] rank 1") {
			t.Errorf("concurrent run: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.errOut)
		}
	}
	out, _, _ := scavctl(t, state, "jobs", "-o", "json")
	var jobs []map[string]any
	if err := json.Unmarshal([]byte(out), &jobs); err != nil || len(jobs) != 3 {
		t.Fatalf("jobs after 3 concurrent runs: %v (%s)", err, out)
	}
}

func TestHelpOnEveryCommand(t *testing.T) {
	for _, c := range [][]string{{}, {"run"}, {"jobs"}, {"status"}, {"logs"}, {"steps"}, {"stop"}, {"move"}, {"report"}, {"top"}, {"sim"}, {"plan"}, {"prices"}, {"version"}} {
		out, errOut, code := scavctl(t, t.TempDir(), append(c, "--help")...)
		if code != 0 || !strings.Contains(out, "Usage:") {
			t.Errorf("scavctl %v --help: exit %d\n%s%s", c, code, out, errOut)
		}
	}
}

func TestBadFlagsAreNamed(t *testing.T) {
	for _, c := range []struct {
		args      []string
		want, not string
	}{
		{[]string{"run", "--workers", "3", "--batch-size", "64", "--", "true"}, "batch size 64 is not divisible by 3 workers", ""},
		// One mistake, one message: not also the request's own "workers 0".
		{[]string{"run", "--workers", "2:1", "--", "true"}, "did you mean --workers 1:2?", "workers 0"},
		{[]string{"run", "--env", "NOEQUALS", "--", "true"}, `--env "NOEQUALS"`, ""},
		{[]string{"run"}, "no command", ""},
		{[]string{"run", "oops", "--", "true"}, `unexpected argument "oops" before --`, ""},
		{[]string{"jobs", "-o", "yaml"}, `-o "yaml"`, ""},
		{[]string{"report", "j", "--format", "pdf"}, `--format "pdf"`, ""},
		{[]string{"report", "j", "--format", "html", "-o", "json"}, "disagree", ""},
		{[]string{"top", "--interval", "1ms"}, "--interval 1ms", ""},
	} {
		_, errOut, code := scavctl(t, t.TempDir(), c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) || c.not != "" && strings.Contains(errOut, c.not) {
			t.Errorf("scavctl %v: exit %d, stderr %q; want an error containing %q (and not %q)", c.args, code, errOut, c.want, c.not)
		}
	}
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestSimGolden runs `scavctl sim -o json` on one application of the shared
// traces and compares it with testdata/sim-cifar10-cost.json (-update rewrites it).
func TestSimGolden(t *testing.T) {
	traces := filepath.Join(repoRoot, "..", "shared", "traces", "cifar10")
	if _, err := os.Stat(traces); err != nil {
		t.Skipf("no shared traces beside the repository: %v", err)
	}
	out, errOut, code := scavctl(t, t.TempDir(), "sim", "--trace", traces, "--objective", "cost", "--policy", "adaptive", "-o", "json")
	if code != 0 {
		t.Fatalf("scavctl sim: exit %d\n%s", code, errOut)
	}
	golden := filepath.Join("testdata", "sim-cifar10-cost.json")
	if *update {
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestSimGolden -update)", err)
	}
	if out != string(want) {
		t.Fatalf("scavctl sim -o json differs from %s (rerun with -update if the change is intended):\n%s", golden, out)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"jct_s", "cost_usd", "relaunches", "history", "predicted_jct_s", "predicted_cost_usd", "oracle", "fixed", "step_time_error"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("sim -o json lacks %q", k)
		}
	}
}

func TestPricesAndPlan(t *testing.T) {
	out, errOut, code := scavctl(t, t.TempDir(), "prices", "-o", "json")
	if code != 0 {
		t.Fatalf("scavctl prices: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{"g4dn.12xlarge", "Standard_ND40rs_v2", "p4d.24xlarge"} {
		if !strings.Contains(out, want) {
			t.Errorf("prices lack %s", want)
		}
	}
	traces := filepath.Join(repoRoot, "..", "shared", "traces", "ncf")
	if _, err := os.Stat(traces); err != nil {
		t.Skipf("no shared traces beside the repository: %v", err)
	}
	out, errOut, code = scavctl(t, t.TempDir(), "plan", "--trace", traces, "--objective", "cost", "--top", "3")
	if code != 0 || len(strings.Split(strings.TrimSpace(out), "\n")) != 4 {
		t.Fatalf("scavctl plan --top 3: exit %d, want a header and 3 rows:\n%s%s", code, out, errOut)
	}
	_, errOut, code = scavctl(t, t.TempDir(), "sim", "--trace", traces, "--objective", "fastest")
	if code == 0 || !strings.Contains(errOut, "--objective") {
		t.Errorf("a bad objective: exit %d, %q", code, errOut)
	}
}

// startJob starts `scavctl run` with args in the background; the test's
// cleanup kills it if the test did not wait for it.
func startJob(t *testing.T, state string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(scavctlBin, append([]string{"--state-dir", state, "run"}, args...)...)
	cmd.Dir = repoRoot
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	testproc.Start(t, cmd)
	return cmd, &out, &errOut
}

// waitForRecords waits until the job started by startJob has n step records
// and returns its id.
func waitForRecords(t *testing.T, state string, errOut *bytes.Buffer, n int) string {
	t.Helper()
	var id string
	for deadline := time.Now().Add(60 * time.Second); id == "" || len(steps(t, state, id)) < n; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the job did not have %d step records within 60s:\n%s", n, errOut.String())
		}
		if m := jobIDRe.FindStringSubmatch(errOut.String()); m != nil {
			id = m[1]
		}
	}
	return id
}

// logLines reads a job's output through `scavctl logs -o json`.
func logLines(t *testing.T, state, id string) []telemetry.LogLine {
	t.Helper()
	return jsonLines[telemetry.LogLine](t, state, "logs", id, "-o", "json")
}

// events returns the JSON events rank 0 of examples/resumable_cnn.py printed, by attempt.
func events(lines []telemetry.LogLine, kind string) map[int]map[string]any {
	out := map[int]map[string]any{}
	for _, l := range lines {
		var ev map[string]any
		if l.Rank == 0 && json.Unmarshal([]byte(l.Line), &ev) == nil && ev["event"] == kind {
			out[l.Attempt] = ev
		}
	}
	return out
}

// checkEveryStepOnce checks that every step 1..last has one record from each
// rank of the world it ran in, and returns last.
func checkEveryStepOnce(t *testing.T, recs []telemetry.StepRecord) int64 {
	t.Helper()
	seen := map[[2]int64]int{}
	world := map[int64]int{}
	var last int64
	for _, r := range recs {
		seen[[2]int64{int64(r.Rank), r.Step}]++
		world[r.Step] = r.World
		last = max(last, r.Step)
	}
	for s := int64(1); s <= last; s++ {
		if world[s] == 0 {
			t.Errorf("step %d: no record", s)
			continue
		}
		for rank := 0; rank < world[s]; rank++ {
			if n := seen[[2]int64{int64(rank), s}]; n != 1 {
				t.Errorf("step %d rank %d (world %d): %d records, want 1", s, rank, world[s], n)
			}
		}
	}
	return last
}

func TestClosedLoopMovesWithoutLosingOrRepeatingSteps(t *testing.T) {
	needTorch(t)
	const target = 2500 // steps at the starting batch: enough for the noise estimate to settle
	state := stateDir(t)
	out, errOut, code := scavctl(t, state, "run", "--workers", "1:2", "--batch-size", "32:256", "--policy", "scavenger",
		"--target-steps", strconv.Itoa(target), "--", pythonBin, "examples/resumable_cnn.py")
	if code != 0 {
		t.Fatalf("scavctl run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	id := jobID(t, errOut)
	var rep report.JobReport
	rout, _, _ := scavctl(t, state, "report", id, "-o", "json")
	if err := json.Unmarshal([]byte(rout), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, rout)
	}
	// How many moves the policy makes depends on what it measures (a
	// probe that is already the best ends the search); at least one move,
	// by its decision, is what this test needs.
	if len(rep.Timeline) < 2 || rep.Decisions == 0 {
		t.Fatalf("the policy relaunched the job %d times with %d decisions, want at least once:\n%s\n%s", len(rep.Timeline)-1, rep.Decisions, rout, errOut)
	}
	recs := steps(t, state, id)
	last := checkEveryStepOnce(t, recs)
	var samples int64
	for _, r := range recs {
		if r.Rank == 0 {
			samples += int64(r.GlobalBatch)
		}
	}
	// The work is counted at the starting batch (SCAV_BASE_BATCH): a step
	// of a larger batch does at most its samples' worth, so the job ends
	// within one step of the target, having seen at least that many samples.
	lines := logLines(t, state, id)
	sums := events(lines, "summary")
	end := sums[rep.Timeline[len(rep.Timeline)-1].Attempt.Attempt]
	if end == nil {
		t.Fatalf("the last attempt printed no summary")
	}
	work, _ := end["work"].(float64)
	if work < target*32 || work >= target*32+256 || float64(samples) < work {
		t.Errorf("work %.0f, %d samples in %d steps: want the work within one batch of the target %d, and no more than the samples", work, samples, last, target*32)
	}
	// The loss on a fixed probe batch right after each restore equals the one
	// right before its checkpoint: the model and optimizer came back whole.
	for _, a := range rep.Timeline[1:] {
		before, after := sums[a.Attempt.Attempt-1], sums[a.Attempt.Attempt]
		if before == nil || after == nil {
			t.Fatalf("attempt %d or the one before printed no summary", a.Attempt.Attempt)
		}
		b, c := before["eval_loss_end"].(float64), after["eval_loss_start"].(float64)
		if math.Abs(b-c) > 1e-4*math.Max(1, math.Abs(b)) {
			t.Errorf("attempt %d: loss %.6f after the restore, %.6f before the checkpoint", a.Attempt.Attempt, c, b)
		}
	}
	t.Logf("%d attempts, last step %d; report:\n%s", len(rep.Timeline), last, rout)
}

// A worker alone has no second gradient: its tracker sends the difference
// estimator's norms (count 2). The example keeps its gradient statistics at
// the job's base batch and counts its work from them: both are what scavd's
// estimator (gns, updated once a record) makes of the same records, to
// rounding, as the records carry the worker's floats exactly.
func TestALoneWorkerCountsItsWorkAsScavengerDoes(t *testing.T) {
	needTorch(t)
	const base, batch, target = 32, 128, 32 * 400
	state := stateDir(t)
	out, errOut, code := scavctl(t, state, "run", "--workers", "1", "--batch-size", strconv.Itoa(batch),
		"--base-batch", strconv.Itoa(base), "--target-samples", strconv.Itoa(target), "--", pythonBin, "examples/resumable_cnn.py")
	if code != 0 {
		t.Fatalf("scavctl run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	id := jobID(t, errOut)
	recs := steps(t, state, id)
	slices.SortFunc(recs, func(a, b telemetry.StepRecord) int { return cmp.Compare(a.Step, b.Step) })
	var est gns.Estimator
	var replayed float64
	var samples int
	for _, r := range recs {
		if s, ok := stepstats.Sample(r, base); ok {
			var err error
			if est, err = est.Update(s); err != nil {
				t.Fatalf("step %d: %v", r.Step, err)
			}
		}
		gain := float64(batch) / base
		if est.Steps() > 0 {
			gain = est.Gain(gain)
		}
		replayed += base * gain
		samples += r.GlobalBatch
	}
	sums := events(logLines(t, state, id), "summary")
	if sums[1] == nil {
		t.Fatal("the job printed no summary")
	}
	work, _ := sums[1]["work"].(float64)
	sqr, okSqr := sums[1]["grad_sqr"].(float64)
	vari, okVar := sums[1]["grad_var"].(float64)
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(math.Abs(b), 1e-12) }
	if !okSqr || !okVar || sums[1]["grad_var_batch"] != float64(base) || est.Steps() < len(recs)/2 || !near(sqr, est.Sqr()) || !near(vari, est.Var()) {
		t.Errorf("the worker's gradient statistics |G|² %v, variance %v at batch %v; scavd's over the same %d records (%d of them with norms): %g, %g at %d",
			sums[1]["grad_sqr"], sums[1]["grad_var"], sums[1]["grad_var_batch"], len(recs), est.Steps(), est.Sqr(), est.Var(), base)
	}
	if work < target || !near(work, replayed) || work > float64(samples) {
		t.Errorf("the worker counted %.1f of work in %d samples (%d steps); replayed as scavd's estimator counts it: %.1f; want at least the target %d, the replay's, and no more than the samples",
			work, samples, len(recs), replayed, target)
	}
}

func TestKilledWhileCheckpointingGoesOnFromTheLastCompleteCheckpoint(t *testing.T) {
	needTorch(t)
	state := stateDir(t)
	cmd, out, errOut := startJob(t, state, "--name", "killed", "--workers", "2", "--batch-size", "32",
		"--", pythonBin, "cmd/scavctl/testdata/dies_in_checkpoint.py", "--steps", "120", "--checkpoint-every", "20")
	// Wait for the first periodic checkpoint (step 20), then move the job:
	// rank 0 dies writing the checkpoint the move asks for.
	id := waitForRecords(t, state, errOut, 2*30)
	if _, e, code := scavctl(t, state, "move", id, "--workers", "1"); code != 0 {
		t.Fatalf("scavctl move: exit %d\n%s", code, e)
	} else if strings.Contains(e, "checkpointed") || !strings.Contains(e, "last complete checkpoint") {
		t.Errorf("scavctl move said %q; want that it fell back to the last complete checkpoint", e)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("scavctl run: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	resumed := events(logLines(t, state, id), "resumed")
	ev := resumed[2]
	if ev == nil {
		t.Fatalf("attempt 2 did not resume\n%s", errOut.String())
	}
	if from := int(ev["from_step"].(float64)); from < 20 || from%20 != 0 {
		t.Fatalf("attempt 2 resumed from step %d, want a periodic checkpoint's (a multiple of 20)\n%s", from, errOut.String())
	}
	j := jobRecord(t, state, id)
	if j.State != api.StateSucceeded || len(j.Attempts) != 2 || j.Attempts[1].Config.Workers != 1 ||
		j.Attempts[0].Move == nil || !j.Attempts[0].Move.Fallback {
		t.Fatalf("job record %+v: want succeeded after 2 attempts, the second at 1 worker after a fallback", j)
	}
}

func TestUninstrumentedJobMovesBySignal(t *testing.T) {
	needTorch(t)
	state := stateDir(t)
	cmd, _, errOut := startJob(t, state, "--name", "plain", "--workers", "1", "--batch-size", "64",
		"--checkpoint-signal", "SIGUSR1", "--grace", "30s", "--", pythonBin, "cmd/scavctl/testdata/uninstrumented.py", "--steps", "3000")
	// The script prints only a tqdm-like bar; its steps are read off it.
	id := waitForRecords(t, state, errOut, 200)
	if _, e, code := scavctl(t, state, "move", id, "--workers", "2"); code != 0 {
		t.Fatalf("scavctl move: exit %d\n%s", code, e)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("scavctl run: %v\nstderr:\n%s", err, errOut.String())
	}
	var saved []string
	for _, l := range logLines(t, state, id) {
		if strings.HasPrefix(l.Line, "saved step") {
			saved = append(saved, fmt.Sprintf("attempt %d: %s", l.Attempt, l.Line))
		}
	}
	if len(saved) != 2 || !strings.HasPrefix(saved[1], "attempt 2: saved step 3000 of 3000") {
		t.Fatalf("checkpoints %q: want one at the move and the last at step 3000 in attempt 2", saved)
	}
	j := jobRecord(t, state, id)
	if len(j.Attempts) != 2 || j.Attempts[1].Config.Workers != 2 || j.Attempts[1].Restore != j.CheckpointDir {
		t.Fatalf("attempts %+v: want the second at 2 workers restoring from %s", j.Attempts, j.CheckpointDir)
	}
	for _, r := range steps(t, state, id) {
		if r.From != telemetry.FromOutput || r.LocalSqr != nil {
			t.Fatalf("step record %+v: want one read off the output, without gradient norms", r)
		}
	}
}

func TestStopCheckpointsAndResumeContinues(t *testing.T) {
	needTorch(t)
	state := stateDir(t)
	cmd, _, errOut := startJob(t, state, "--name", "pausable", "--workers", "2", "--batch-size", "32",
		"--target-steps", "400", "--", pythonBin, "examples/resumable_cnn.py")
	id := waitForRecords(t, state, errOut, 2*50)
	// SIGTERM, as a pre-emption or a shutdown sends it: the job checkpoints and stops.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) || !strings.Contains(errOut.String(), "--resume "+id) {
		t.Fatalf("scavctl exit %d after SIGTERM, want 143 and a hint to resume:\n%s", code, errOut.String())
	}
	stoppedAt := len(steps(t, state, id)) / 2
	out, e, code := scavctl(t, state, "run", "--resume", id)
	if code != 0 {
		t.Fatalf("scavctl run --resume: exit %d\n%s%s", code, out, e)
	}
	if !strings.Contains(out, fmt.Sprintf(`"from_step": %d`, stoppedAt)) {
		t.Errorf("the resumed attempt did not start from step %d:\n%s", stoppedAt, out)
	}
	last := checkEveryStepOnce(t, steps(t, state, id))
	if last <= int64(stoppedAt) {
		t.Fatalf("the job ended at step %d, not past the stop at %d", last, stoppedAt)
	}
}

// TestPreemptionNoticeCheckpointsAndRelaunches sends the workers the
// scheduler's pre-emption signal, as Slurm's --signal or `scancel
// --signal=USR1` does: the python client turns it into a notice, the job
// checkpoints, and the next attempt resumes from that checkpoint.
func TestPreemptionNoticeCheckpointsAndRelaunches(t *testing.T) {
	needTorch(t)
	state := stateDir(t)
	pidDir := t.TempDir()
	// The local launcher names no pre-emption signal; a scheduler's launcher
	// does (SCAV_PREEMPT_SIGNAL). The wrapper sets it and records each rank's pid.
	wrapper := `echo $$ > "$PID_DIR/rank$RANK.pid"; SCAV_PREEMPT_SIGNAL=USR1 exec "$@"`
	cmd, _, errOut := startJob(t, state, "--name", "preempted", "--workers", "2", "--batch-size", "32",
		"--target-steps", "300", "--env", "PID_DIR="+pidDir, "--", "/bin/sh", "-c", wrapper, "sh", pythonBin, "examples/resumable_cnn.py")
	id := waitForRecords(t, state, errOut, 2*40)
	for _, pid := range pids(t, pidDir, 2) {
		if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
			t.Fatalf("signal rank %d: %v", pid, err)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("scavctl run: %v\nstderr:\n%s", err, errOut.String())
	}
	j := jobRecord(t, state, id)
	a := j.Attempts
	if j.State != api.StateSucceeded || len(a) != 2 || !strings.Contains(a[0].EndReason, "pre-empted") ||
		a[1].Restore == "" || a[1].Config.Workers != 2 || a[0].Move == nil || a[0].Move.Fallback {
		t.Fatalf("job record %+v: want succeeded after 2 attempts, the first moved for the pre-emption with an acknowledged checkpoint", j)
	}
	resumed := events(logLines(t, state, id), "resumed")
	if ev := resumed[2]; ev == nil || int64(ev["from_step"].(float64)) != a[0].LastStep {
		t.Fatalf("attempt 2 resumed %v, want from step %d", ev, a[0].LastStep)
	}
	checkEveryStepOnce(t, steps(t, state, id))
}
