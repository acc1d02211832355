package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/syncbuf"
	"github.com/scavenger-ml/scavenger/internal/testproc"
)

// The telemetry socket against its users (issue 20) and against a stalled
// daemon (issue 21): a root scavd, unprivileged users made and removed by
// each test. make bench-security's table cites these tests by name.

// ingestStats reads the daemon's telemetry counters.
func ingestStats(t *testing.T, info api.Info) api.IngestStats {
	t.Helper()
	c, err := api.Dial(t.Context(), info.API, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st.Ingest
}

// scavdLog is the log of the scavd startScavd started last in this test.
func scavdLog(t *testing.T) string {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(filepath.Dir(t.TempDir()), "*", "scavd.log"))
	var all strings.Builder
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		all.Write(b)
	}
	return all.String()
}

// userJob starts `scavctl run NAME -- command...` as u in dir; its output
// goes to out.
func userJob(t *testing.T, u testUser, info api.Info, dir string, out *syncbuf.Buffer, name string, command ...string) {
	t.Helper()
	argv := []string{"--reuid=" + u.name, "--regid=" + u.name, "--init-groups", "--", scavctlBin, "--api", info.API, "run", "--name", name, "--grace", "2s", "--"}
	cmd := exec.Command("setpriv", append(argv, command...)...)
	cmd.Dir, cmd.Env = dir, []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	cmd.Stdout, cmd.Stderr = out, out
	testproc.Start(t, cmd)
}

// hog is a worker that opens n connections bound to its attempt and keeps
// them, then writes step records on the first as fast as it can for flood
// seconds; it says how many the daemon left open, and holds them until the
// file stop exists.
const hog = `import json, os, socket, sys, time
e = os.environ
n, flood = int(sys.argv[1]), float(sys.argv[2])
def rec(**kw):
    d = {"v": 1, "job": e["SCAV_JOB_ID"], "attempt": int(e["SCAV_ATTEMPT"]), "rank": 0, "world": 1, "t": time.time()}
    d.update(kw); return (json.dumps(d) + "\n").encode()
conns = []
for i in range(n):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(e["SCAV_SOCKET"])
        s.sendall(rec(kind="hello", step=0, token=e["SCAV_TOKEN"]))
    except OSError:
        s.close(); continue
    conns.append(s)
time.sleep(1)
open_ = 0
for s in conns:
    s.setblocking(False)
    try:
        open_ += s.recv(1) != b""
    except BlockingIOError:
        open_ += 1
    except OSError:
        pass
print("open", open_, flush=True)
s = conns[0]; s.setblocking(True); s.settimeout(30)
step, end = 0, time.time() + flood
pad = "x" * 900
while time.time() < end:
    lines = b"".join(rec(step=step + i + 1, dt=0.001, note=pad) for i in range(100))
    step += 100
    s.sendall(lines)
print("flooded", step, flush=True)
while not os.path.exists("stop"):
    time.sleep(0.1)
`

// TestTelemetryBoundsPerUser: one user holding every connection she may
// open and flooding step records does not stop another user's job from
// reporting its steps (issue 20: one global cap of 4096 connections a user
// could hold; no bound on a user's step bytes).
func TestTelemetryBoundsPerUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: runs as root (useradd, setpriv)")
	}
	alice, bob := addUser(t, "a"), addUser(t, "b")
	work := sharedDir(t)
	info := startScavd(t, filepath.Join(work, "state"), "--telemetry-conns-per-user", "40", "--telemetry-conns", "120",
		"--telemetry-step-bytes-per-second", "100000", "--telemetry-step-burst", "100000")
	var aliceOut syncbuf.Buffer
	userJob(t, alice, info, work, &aliceOut, "hog", pythonBin, "-c", hog, "200", "3")
	defer func() { _ = os.WriteFile(filepath.Join(work, "stop"), nil, 0o644) }()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(aliceOut.String(), "open "); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("alice's job did not open its connections:\n%s", aliceOut.String())
		}
	}
	// Bob's job reports 30 steps while she holds hers and floods.
	out, e, code := bob.as(t, work, nil, scavctlBin, "--api", info.API, "run", "--name", "bobs", "--", pythonBin, "-c",
		"import scavenger, time\nfor i in range(30):\n    time.sleep(0.02); scavenger.step(samples=1, loss=1.0)\nscavenger.close(timeout=10)\n")
	if code != 0 {
		t.Fatalf("bob's job failed (exit %d):\n%s%s", code, out, e)
	}
	bobs := jobID(t, e)
	if recs := steps(t, filepath.Join(work, "state"), bobs); len(recs) != 30 {
		t.Errorf("bob's job has %d step records while alice holds her connections, want 30", len(recs))
	}
	st := ingestStats(t, info)
	if st.Refused["user_connections"] == 0 {
		t.Errorf("no connection of alice's refused: %+v", st)
	}
	if !strings.Contains(aliceOut.String(), "open 40") {
		t.Errorf("alice holds more than her 40 connections: %s", aliceOut.String())
	}
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(aliceOut.String(), "flooded"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("alice's flood did not end:\n%s", aliceOut.String())
		}
	}
	if st := ingestStats(t, info); st.Refused["step_bytes"] == 0 {
		t.Errorf("alice's flood never waited for her step bytes: %+v", st)
	}
}

// replayer connects as a worker of an attempt (its job, attempt and token
// in argv) and writes a hello and 1000 step records.
const replayer = `import json, socket, sys, time
job, attempt, token, sock = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def rec(**kw):
    d = {"v": 1, "job": job, "attempt": attempt, "rank": 0, "world": 1, "t": time.time()}
    d.update(kw); return (json.dumps(d) + "\n").encode()
s = socket.socket(socket.AF_UNIX); s.connect(sock)
s.sendall(rec(kind="hello", step=0, token=token) + b"".join(rec(step=i, dt=0.01) for i in range(1, 1001)))
time.sleep(1)
`

// TestTelemetryTokenEndsWithItsAttempt: the token of an attempt that has
// ended binds nothing (issue 20: a finished attempt's hello replayed and
// stored 1000 records).
func TestTelemetryTokenEndsWithItsAttempt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: runs as root (useradd, setpriv)")
	}
	alice := addUser(t, "a")
	work := sharedDir(t)
	state := filepath.Join(work, "state")
	info := startScavd(t, state)
	out, e, code := alice.as(t, work, nil, scavctlBin, "--api", info.API, "run", "--name", "short", "--", "/bin/sh", "-c",
		`echo "TOKEN $SCAV_JOB_ID $SCAV_ATTEMPT $SCAV_TOKEN $SCAV_SOCKET"`)
	if code != 0 {
		t.Fatalf("alice's job failed (exit %d):\n%s%s", code, out, e)
	}
	var job, attempt, token, sock string
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, "TOKEN "); i >= 0 {
			f := strings.Fields(l[i:])
			if len(f) == 5 {
				job, attempt, token, sock = f[1], f[2], f[3], f[4]
			}
		}
	}
	if token == "" {
		t.Fatalf("the job printed no token:\n%s", out)
	}
	before := ingestStats(t, info)
	o, e2, code := alice.as(t, work, nil, pythonBin, "-c", replayer, job, attempt, token, sock)
	if code != 0 {
		t.Fatalf("replay: exit %d\n%s%s", code, o, e2)
	}
	if recs := steps(t, state, job); len(recs) != 0 {
		t.Errorf("a finished attempt's token stored %d records", len(recs))
	}
	after := ingestStats(t, info)
	if after.Dropped["attempt_ended"] <= before.Dropped["attempt_ended"] {
		t.Errorf("the replayed hello was not refused as an ended attempt's: %+v", after)
	}
}

// guesser writes hellos with made-up tokens for a job as fast as it can for
// three seconds, a new connection every ten, and says how many it wrote.
const guesser = `import json, os, socket, sys, time
job, sock = sys.argv[1], sys.argv[2]
n, end = 0, time.time() + 3
while time.time() < end:
    try:
        s = socket.socket(socket.AF_UNIX); s.connect(sock)
        for i in range(10):
            s.sendall((json.dumps({"v": 1, "kind": "hello", "job": job, "attempt": 1, "rank": 0, "world": 1, "step": 0,
                                   "t": time.time(), "token": os.urandom(16).hex()}) + "\n").encode())
            n += 1
        s.close()
    except OSError:
        pass
print("guesses", n)
`

// TestTelemetryTokenGuessesLimited: a user guessing another's token is
// slowed to a few guesses a second and named in the log (issue 20: 11,331
// guesses in 5 s were neither limited nor logged).
func TestTelemetryTokenGuessesLimited(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: runs as root (useradd, setpriv)")
	}
	alice, bob := addUser(t, "a"), addUser(t, "b")
	work := sharedDir(t)
	state := filepath.Join(work, "state")
	info := startScavd(t, state)
	aliceRun := exec.Command("setpriv", "--reuid="+alice.name, "--regid="+alice.name, "--init-groups", "--",
		scavctlBin, "--api", info.API, "run", "--name", "target", "--grace", "1s", "--", "/bin/sh", "-c", `while [ ! -e stop ]; do sleep 0.1; done`)
	aliceRun.Dir, aliceRun.Env = work, []string{"PATH=/usr/bin:/bin", "HOME=" + work}
	testproc.Start(t, aliceRun)
	defer func() { _ = os.WriteFile(filepath.Join(work, "stop"), nil, 0o644) }()
	job := awaitUserJob(t, state, alice.name)
	before := ingestStats(t, info)
	o, e, code := bob.as(t, work, nil, pythonBin, "-c", guesser, job.ID, info.Socket)
	if code != 0 {
		t.Fatalf("guesser: exit %d\n%s%s", code, o, e)
	}
	after := ingestStats(t, info)
	tried := after.Dropped["unbound"] - before.Dropped["unbound"]
	// The daemon takes 20 at once and 2 a second after: 26 in 3 s (and a
	// few on connections it had taken before it counted them out).
	if tried > 60 {
		t.Errorf("the daemon checked %d guessed tokens in 3 s (%s); want at most the burst and the rate", tried, strings.TrimSpace(o))
	}
	if after.Refused["bad_tokens"] == 0 {
		t.Errorf("no connection of the guesser refused: %+v", after)
	}
	log := scavdLog(t)
	if !strings.Contains(log, "telemetry hello with a wrong token") || !strings.Contains(log, fmt.Sprint(bob.uid)) {
		t.Errorf("the log does not name the guesser (uid %d):\n%s", bob.uid, log)
	}
	t.Logf("%s; %d checked", strings.TrimSpace(o), tried)
}

// frozenWorker reports steps every 3 ms through the python client.
const frozenWorker = `import time, scavenger
for i in range(int(__import__("sys").argv[1])):
    time.sleep(0.003)
    scavenger.step(samples=8, loss=1.0)
scavenger.close(timeout=60)
`

// frozenTrial runs a job of n steps and freezes its scavd (SIGSTOP)
// for freeze from about 2 s in, then thaws it (SIGCONT); it returns the
// records stored and the steps they cover, once the job has ended.
func frozenTrial(t *testing.T, n int, freeze time.Duration) (records, unique int) {
	t.Helper()
	state := stateDir(t)
	info := startScavd(t, state)
	cmd, _, errOut := startJob(t, state, "--name", "frozen", "--", pythonBin, "-c", frozenWorker, fmt.Sprint(n))
	id := waitForRecords(t, state, errOut, 10)
	time.Sleep(time.Second)
	if err := syscall.Kill(info.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(freeze)
	if err := syscall.Kill(info.PID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the job failed after the freeze: %v\n%s", err, errOut.String())
		}
	case <-ctx.Done():
		t.Fatalf("the job did not end within 2 min of the thaw:\n%s", errOut.String())
	}
	recs := steps(t, state, id)
	seen := map[int64]bool{}
	for _, r := range recs {
		seen[r.Step] = true
	}
	return len(recs), len(seen)
}

// TestFrozenScavdStoresEveryRecordOnce: a scavd frozen for 8 s (SIGSTOP,
// then SIGCONT) while a worker steps every 3 ms stores each of its records
// exactly once (issue 21: 8 s gave 209 copies, 30 s 2-4 copies of each).
// make bench-faults runs the trial for 4, 8, 20 and 30 s.
func TestFrozenScavdStoresEveryRecordOnce(t *testing.T) {
	const n = 4000
	records, unique := frozenTrial(t, n, 8*time.Second)
	if records != n || unique != n {
		t.Errorf("%d records stored covering %d of %d steps; want each step once", records, unique, n)
	}
}
