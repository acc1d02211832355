package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/launchers/local"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

func TestRestartAfter(t *testing.T) {
	crashed := plugins.Result{ExitCode: 137, FailedRank: 1, Ranks: []plugins.RankResult{{Rank: 0, Stopped: true, Signal: "SIGTERM"}, {Rank: 1, ExitCode: 137, Signal: "SIGKILL"}}}
	exit3 := plugins.Result{ExitCode: 3, FailedRank: 0, Ranks: []plugins.RankResult{{Rank: 0, ExitCode: 3}}}
	for _, c := range []struct {
		name    string
		in      crash
		restart bool
		delay   time.Duration
		reason  string // a part of it
	}{
		{"success", crash{Result: plugins.Result{FailedRank: -1}, MaxRestarts: 3}, false, 0, ""},
		{"first crash restarts at once", crash{Result: crashed, MaxRestarts: 3}, true, 0, "rank 1 was killed by SIGKILL; restart 1 of 3"},
		{"second waits 1s", crash{Result: exit3, Restarts: 1, MaxRestarts: 3}, true, time.Second, "rank 0 exited with 3; restart 2 of 3"},
		{"third waits 2s", crash{Result: exit3, Restarts: 2, MaxRestarts: 3}, true, 2 * time.Second, "restart 3 of 3"},
		{"back-off is bounded", crash{Result: exit3, Restarts: 60, MaxRestarts: 100}, true, maxRestartBackoff, "restart 61 of 100"},
		{"crash loop", crash{Result: exit3, Restarts: 3, MaxRestarts: 3}, false, 0, "crash loop: it crashed 4 times and was restarted 3 times"},
		{"no restarts", crash{Result: exit3, MaxRestarts: 0}, false, 0, "no restarts allowed (--max-restarts 0)"},
		{"stopped", crash{Result: crashed, Stopped: true, MaxRestarts: 3}, false, 0, ""},
		{"stopped by the launcher", crash{Result: plugins.Result{ExitCode: 143, Stopped: true}, MaxRestarts: 3}, false, 0, ""},
		{"a move", crash{Result: crashed, Moving: true, MaxRestarts: 3}, false, 0, ""},
		{"the daemon closes", crash{Result: crashed, Closing: true, MaxRestarts: 3}, false, 0, ""},
		{"a lost host is not a crash", crash{Result: plugins.Result{ExitCode: 255, FailedRank: 1, LostHosts: []string{"h2"}}, MaxRestarts: 3}, false, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := restartAfter(c.in)
			if v.Restart != c.restart || v.Delay != c.delay || !strings.Contains(v.Reason, c.reason) || (c.reason == "") != !v.Crashed {
				t.Errorf("restartAfter(%+v) = %+v; want restart %v after %s, reason with %q", c.in, v, c.restart, c.delay, c.reason)
			}
		})
	}
}

// waitEnd waits for job id's runner to end and returns its record.
func waitEnd(t *testing.T, g *Registry, id string, within time.Duration) api.Job {
	t.Helper()
	if r := g.running(id); r != nil {
		select {
		case <-r.done:
		case <-time.After(within):
			t.Fatalf("job %s did not end within %s", id, within)
		}
	}
	j, err := g.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// events collects job id's events from now on.
func followEvents(t *testing.T, nc *nats.Conn, id string) func() []telemetry.Event {
	t.Helper()
	ch := make(chan telemetry.Event, 64)
	sub, err := nc.Subscribe(telemetry.EventSubject(id), func(m *nats.Msg) {
		var e telemetry.Event
		if json.Unmarshal(m.Data, &e) == nil {
			ch <- e
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() []telemetry.Event {
		_ = nc.Flush()
		var out []telemetry.Event
		for {
			select {
			case e := <-ch:
				out = append(out, e)
			case <-time.After(200 * time.Millisecond):
				return out
			}
		}
	}
}

// crashingWorker writes a checkpoint of step 5 (the python client's
// manifest) in its first attempt, then rank 1 kills itself with SIGKILL; the
// next attempt prints where it starts from and exits 0.
const crashingWorker = `d="$SCAV_CHECKPOINT_DIR"
if [ "$SCAV_ATTEMPT" = 1 ]; then
  if [ "$RANK" = 0 ]; then
    echo x > "$d/ckpt-5.pt"; printf '{"format":"scavenger.manifest/1","checkpoint":"ckpt-5.pt","step":5,"size":2}' > "$d/latest.json"
    : > "$d/.ckpt-6.pt.4242.scavtmp"
  fi
  sleep 0.3; [ "$RANK" = 1 ] && kill -9 $$; sleep 30
fi
echo "restore=$SCAV_RESTORE start=$SCAV_START_STEP"`

// TestCrashedAttemptRestartsFromTheCheckpoint: a worker killed by SIGKILL
// restarts the job from its last complete checkpoint; the record and an
// event say why; a killed writer's temporary file is cleaned up.
func TestCrashedAttemptRestartsFromTheCheckpoint(t *testing.T) {
	g, _, nc := registry(t)
	j, err := g.Submit(context.Background(), api.RunRequest{Command: []string{"/bin/sh", "-c", crashingWorker}, Dir: t.TempDir(),
		Config: plugins.Config{Workers: 2}, Grace: api.Duration(2 * time.Second)}, me())
	if err != nil {
		t.Fatal(err)
	}
	evs := followEvents(t, nc, j.ID)
	j = waitEnd(t, g, j.ID, time.Minute)
	if j.State != api.StateSucceeded || len(j.Attempts) != 2 || j.Restarts != 1 || j.MaxRestarts != api.DefaultMaxRestarts {
		t.Fatalf("job %s (%s) after %d attempts, %d restarts of %d; want succeeded after 2 attempts, 1 restart of 3", j.State, j.Message, len(j.Attempts), j.Restarts, j.MaxRestarts)
	}
	if why := j.Attempts[0].EndReason; !strings.HasPrefix(why, "crashed: rank 1 was killed by SIGKILL; restart 1 of 3") {
		t.Errorf("attempt 1 ended %q, want the crash named", why)
	}
	ckpt := filepath.Join(j.CheckpointDir, "ckpt-5.pt")
	if j.Attempts[1].Restore != ckpt {
		t.Errorf("attempt 2 restored %q, want %s", j.Attempts[1].Restore, ckpt)
	}
	var restarting, started string
	for _, e := range evs() {
		switch {
		case e.Kind == telemetry.EventRestarting:
			restarting = e.Message
		case e.Kind == telemetry.EventStarted && e.Attempt == 2:
			started = e.Message
		}
	}
	if !strings.Contains(restarting, "from the checkpoint of step 5") || !strings.Contains(started, "after a crash") {
		t.Errorf("events: restarting %q, started %q; want the crash and the checkpoint named", restarting, started)
	}
	if left, _ := filepath.Glob(filepath.Join(j.CheckpointDir, ".*.scavtmp")); len(left) > 0 {
		t.Errorf("temporary files left in the checkpoint directory: %v", left)
	}
}

// TestCrashLoopStops: a job that crashes every time is restarted as often
// as it may, with back-off, and then fails saying so. (Its exit code
// changes from one attempt to the next: two alike before the first step
// end it sooner, TestRestartRules; its restart window is the least there is,
// so that --max-restarts alone bounds it.)
func TestCrashLoopStops(t *testing.T) {
	g, _, _ := registry(t)
	two := 2
	began := time.Now()
	j, err := g.Submit(context.Background(), api.RunRequest{Command: []string{"/bin/sh", "-c", `exit $(( SCAV_ATTEMPT == 2 ? 4 : 3 ))`}, Dir: t.TempDir(),
		Config: plugins.Config{Workers: 1}, MaxRestarts: &two, Faults: api.Faults{RestartWindow: api.Duration(time.Nanosecond)}}, me())
	if err != nil {
		t.Fatal(err)
	}
	j = waitEnd(t, g, j.ID, time.Minute)
	took := time.Since(began)
	if j.State != api.StateFailed || *j.ExitCode != 3 || len(j.Attempts) != 3 || j.Restarts != 2 {
		t.Fatalf("job %s exit %v after %d attempts (%d restarts); want failed, 3, after 3 attempts", j.State, *j.ExitCode, len(j.Attempts), j.Restarts)
	}
	if !strings.Contains(j.Message, "crash loop") || !strings.Contains(j.Message, "--max-restarts") {
		t.Errorf("message %q does not say it is a crash loop", j.Message)
	}
	if took < firstRestartBackoff {
		t.Errorf("3 attempts in %s: no back-off before the second restart", took)
	}
}

// TestFailedStartNamesItsAttempt: the final event of a job that could not
// start carries the attempt that failed (a follower waits for attempt 1).
func TestFailedStartNamesItsAttempt(t *testing.T) {
	g, _, nc := registry(t)
	j, err := g.Submit(context.Background(), api.RunRequest{Command: []string{"/nonexistent/cmd"}, Dir: t.TempDir(),
		Config: plugins.Config{Workers: 1}}, me())
	if err != nil {
		t.Fatal(err)
	}
	evs := followEvents(t, nc, j.ID)
	j = waitEnd(t, g, j.ID, time.Minute)
	var fin *telemetry.Event
	for _, e := range evs() {
		if e.Kind == telemetry.EventFinished {
			fin = &e
		}
	}
	if j.State != api.StateFailed || j.Attempt != 1 || fin == nil || fin.Attempt != 1 || !strings.Contains(fin.Message, "/nonexistent/cmd") {
		t.Fatalf("job %s attempt %d, final event %+v; want failed, attempt 1, naming the command", j.State, j.Attempt, fin)
	}
}

// TestCapacityIsCheckedAtSubmit: a request for more workers than the
// launcher can start, or a range that goes above it, is refused with the limit.
func TestCapacityIsCheckedAtSubmit(t *testing.T) {
	nc, st := store(t)
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	g := New(context.Background(), Options{Log: log, Launcher: local.New(local.Options{Logger: log, MaxWorkers: 2}),
		NC: nc, KV: st.Jobs, Index: index(t, st), Node: "n1", Socket: "/nonexistent.sock", CheckpointRoot: t.TempDir()})
	t.Cleanup(func() { g.Close(context.Background()) })
	for _, c := range []struct {
		req  api.RunRequest
		want string
	}{
		{api.RunRequest{Config: plugins.Config{Workers: 100000000}}, "--workers 100000000: launcher local starts at most 2 workers"},
		{api.RunRequest{Config: plugins.Config{Workers: 1, GlobalBatch: 32}, Optimize: api.Optimize{Policy: "adaptive", TargetSamples: 1000,
			MinWorkers: 1, MaxWorkers: 4, MinBatch: 32, MaxBatch: 64}}, "--workers 1:4: the range goes above the 2 workers"},
	} {
		c.req.Command, c.req.Dir = []string{"/bin/true"}, t.TempDir()
		_, err := g.Submit(context.Background(), c.req, me())
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--local-slots") {
			t.Errorf("Submit(%d workers, range to %d) = %v; want %q", c.req.Config.Workers, c.req.Optimize.MaxWorkers, err, c.want)
		}
	}
	if len(g.Active()) != 0 {
		t.Errorf("refused jobs run: %v", g.Active())
	}
}

// TestDrainSpoolTakesOnlyUnclaimedFiles: a spool file a live worker claimed
// (to send it itself) is left to it; once the workers are gone, every file
// is taken, and unfinished writes are removed.
func TestDrainSpoolTakesOnlyUnclaimedFiles(t *testing.T) {
	nc, _ := store(t)
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	dir := t.TempDir()
	g := &Registry{o: Options{NC: nc}, log: log}
	g.js, _ = jetstream.New(nc)
	r := &runner{g: g, log: log, rec: record{job: api.Job{ID: "spool-000001", CheckpointDir: dir}}}
	spool := filepath.Join(dir, spoolDir)
	if err := os.Mkdir(spool, 0o700); err != nil {
		t.Fatal(err)
	}
	line := func(step int) string {
		b, _ := json.Marshal(telemetry.StepRecord{V: telemetry.SchemaVersion, Job: "spool-000001", Attempt: 1, World: 1, Step: int64(step), Time: 1.7e9})
		return string(b) + "\n"
	}
	for name, text := range map[string]string{"a1-r0-9-000001.jsonl": line(1), "a1-r0-9-000002.jsonl" + sendingSuffix: line(2),
		"a1-r0-9-000003.jsonl.tmp": line(3)} {
		if err := os.WriteFile(filepath.Join(spool, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var got []int64
	sub, err := nc.Subscribe(telemetry.StepSubject("spool-000001"), func(m *nats.Msg) {
		recs, _ := telemetry.DecodeBatch(m.Data)
		mu.Lock()
		defer mu.Unlock()
		for _, rec := range recs {
			got = append(got, rec.Step)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	steps := func() []int64 {
		_ = nc.Flush()
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		return append([]int64(nil), got...)
	}
	r.g.drainSpool(context.Background(), r.rec.job, false)
	if s := steps(); !reflect.DeepEqual(s, []int64{1}) {
		t.Fatalf("with the workers alive, published %v; want only the unclaimed file's step 1", s)
	}
	r.g.drainSpool(context.Background(), r.rec.job, true)
	if s := steps(); !reflect.DeepEqual(s, []int64{1, 2}) {
		t.Fatalf("with the workers gone, published %v; want steps 1 and 2", s)
	}
	if _, err := os.Stat(spool); !os.IsNotExist(err) {
		ents, _ := os.ReadDir(spool)
		t.Errorf("the spool directory is left with %v", ents)
	}
}

// TestStepTimeFromTheFirstRecord: the first step record of an attempt gives
// the step time (its dt) before two consecutive records do, so a move asked
// for at once leads by time; consecutive records then smooth it.
func TestStepTimeFromTheFirstRecord(t *testing.T) {
	var p progress
	p.begin(1, 0, 0, 0)
	if got := p.now().StepTime; got != 0 {
		t.Fatalf("step time %v before any record", got)
	}
	p.saw(telemetry.StepRecord{Attempt: 1, Rank: 1, Step: 1, Time: 100, Seconds: 0.5})
	if got := p.now().StepTime; got != 0 {
		t.Fatalf("step time %v from rank 1's record; want only rank 0's", got)
	}
	p.saw(telemetry.StepRecord{Attempt: 1, Rank: 0, Step: 1, Time: 100, Seconds: 0.01})
	if got := p.now().StepTime; got != 0.01 {
		t.Fatalf("step time %v after the first record, want its dt 0.01", got)
	}
	p.saw(telemetry.StepRecord{Attempt: 1, Rank: 0, Step: 2, Time: 100.02, Seconds: 0.02})
	if got := p.now().StepTime; math.Abs(got-(0.8*0.01+0.2*0.02)) > 1e-9 {
		t.Fatalf("step time %v after two records, want the smoothed 0.012", got)
	}
}

// TestRestartRules (issues 21 and 23): past --max-restarts a job restarts
// while its back-off is under its window (2 minutes by default, so that a
// passing fault is outlasted); a command that cannot be run is not
// restarted, nor one that crashed before its first step twice alike; an
// out-of-memory kill is named as one. Each says why.
func TestRestartRules(t *testing.T) {
	exit := func(code int) plugins.Result {
		return plugins.Result{ExitCode: code, FailedRank: 0, Ranks: []plugins.RankResult{{Rank: 0, ExitCode: code}}}
	}
	killed := plugins.Result{ExitCode: 137, FailedRank: 0, Ranks: []plugins.RankResult{{Rank: 0, ExitCode: 137, Signal: "SIGKILL", PID: 42}}}
	three, one := 3, 1
	w := api.DefaultRestartWindow
	for _, c := range []struct {
		name    string
		in      crash
		restart bool
		delay   time.Duration
		reason  string
	}{
		{"past --max-restarts within the window", crash{Result: exit(3), Restarts: 3, MaxRestarts: 3, Window: w}, true, 4 * time.Second,
			"restart 4 (past --max-restarts 3 while the back-off is under 2m0s)"},
		{"the window spent", crash{Result: exit(3), Restarts: 9, MaxRestarts: 3, Window: w}, false, 0,
			"crash loop: it crashed 10 times and was restarted 9 times over 2m1s of back-off"},
		{"--max-restarts 0 still never restarts", crash{Result: exit(3), MaxRestarts: 0, Window: w}, false, 0, "no restarts allowed"},
		{"command not found", crash{Result: exit(127), MaxRestarts: 3, Window: w}, false, 0,
			"rank 0 exited with 127 (command not found); not restarted: a command that cannot be run fails the same way each time"},
		{"command not executable", crash{Result: exit(126), MaxRestarts: 3, Window: w}, false, 0, "(command not executable); not restarted"},
		{"early twice alike", crash{Result: exit(1), Restarts: 1, MaxRestarts: 3, Window: w, Early: true, PrevEarly: &one}, false, 0,
			"not restarted: it crashed before its first step twice, with exit 1 both times"},
		{"early twice, not alike", crash{Result: exit(1), Restarts: 1, MaxRestarts: 3, Window: w, Early: true, PrevEarly: &three}, true, time.Second, "restart 2 of 3"},
		{"early once", crash{Result: exit(1), MaxRestarts: 3, Window: w, Early: true}, true, 0, "restart 1 of 3"},
		{"an out-of-memory kill", crash{Result: killed, MaxRestarts: 3, Window: w, OOM: []int{0}}, true, 0,
			"rank 0 was killed by the kernel's out-of-memory killer (SIGKILL)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := restartAfter(c.in)
			if v.Restart != c.restart || v.Delay != c.delay || !strings.Contains(v.Reason, c.reason) || !v.Crashed {
				t.Errorf("restartAfter = %+v; want restart %v after %s, reason with %q", v, c.restart, c.delay, c.reason)
			}
		})
	}
	// By default a crash loop is declared only after at least 2 minutes of back-off.
	for n := 0; ; n++ {
		if v := restartAfter(crash{Result: exit(3), Restarts: n, MaxRestarts: api.DefaultMaxRestarts, Window: w}); !v.Restart {
			if backedOff(n) < 2*time.Minute {
				t.Errorf("a crash loop after %s of back-off", backedOff(n))
			}
			break
		}
	}
}

// TestOOMKillsInTheKernelLog: the out-of-memory killer's records name the
// pids it killed (a cgroup's limit or the machine's), from a time on.
func TestOOMKillsInTheKernelLog(t *testing.T) {
	recs := []string{
		"6,3306,3453812004,-;scvc7ouci2 (unregistering): left allmulticast mode",
		"3,3400,5300737400,-;Memory cgroup out of memory: Killed process 10660 (python3) total-vm:321152kB, anon-rss:65280kB",
		"3,3401,5400000000,-;Out of memory: Killed process 777 (java) total-vm:1kB",
		"3,3402,1000,-;Out of memory: Killed process 555 (old) total-vm:1kB",
		"6,3403,5500000000,-;Killed process 999 (not by the oom killer)",
		"garbage",
	}
	got := oomKills(recs, 2000)
	if want := map[int]bool{10660: true, 777: true}; !reflect.DeepEqual(got, want) {
		t.Errorf("oomKills = %v, want %v", got, want)
	}
}

// TestCommandsThatCannotRunAreNotRestarted (issue 23): a command that is not
// found ends at its first attempt; one that fails at its imports, before
// its first step, ends at its second; each end says why.
func TestCommandsThatCannotRunAreNotRestarted(t *testing.T) {
	g, _, _ := registry(t)
	for _, c := range []struct {
		cmd      []string
		attempts int
		why      string
	}{
		{[]string{"/bin/sh", "-c", "no-such-command-anywhere"}, 1, "exited with 127 (command not found); not restarted"},
		{[]string{"/bin/sh", "-c", "echo 'ModuleNotFoundError: no module named torchh' >&2; exit 1"}, 2, "crashed before its first step twice, with exit 1 both times"},
	} {
		j, err := g.Submit(context.Background(), api.RunRequest{Command: c.cmd, Dir: t.TempDir(), Config: plugins.Config{Workers: 1}}, me())
		if err != nil {
			t.Fatal(err)
		}
		j = waitEnd(t, g, j.ID, time.Minute)
		if j.State != api.StateFailed || len(j.Attempts) != c.attempts || !strings.Contains(j.Message, c.why) {
			t.Errorf("%s: %s after %d attempts: %q; want failed after %d, saying %q", c.cmd[2], j.State, len(j.Attempts), j.Message, c.attempts, c.why)
		}
	}
}

// TestOOMKillIsNamed (issue 21): a worker the out-of-memory killer ends (in
// a memory cgroup of 64 MB) is said to have been, not merely "killed by
// SIGKILL".
func TestOOMKillIsNamed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a memory cgroup and the kernel log need root")
	}
	mem := filepath.Join("/sys/fs/cgroup/memory", "scavtest-oom-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(mem, 0o755); err != nil {
		t.Skipf("no memory cgroup (v1): %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(mem) })
	if err := os.WriteFile(filepath.Join(mem, "memory.limit_in_bytes"), []byte("64M"), 0); err != nil {
		t.Fatal(err)
	}
	g, _, _ := registry(t)
	zero := 0
	script := fmt.Sprintf(`echo $$ > %s/cgroup.procs && exec /usr/bin/python3 -c "b = bytearray(300 * 2**20)"`, mem)
	j, err := g.Submit(context.Background(), api.RunRequest{Command: []string{"/bin/sh", "-c", script}, Dir: t.TempDir(),
		Config: plugins.Config{Workers: 1}, MaxRestarts: &zero}, me())
	if err != nil {
		t.Fatal(err)
	}
	j = waitEnd(t, g, j.ID, time.Minute)
	if want := "rank 0 was killed by the kernel's out-of-memory killer (SIGKILL)"; j.State != api.StateFailed || !strings.Contains(j.Message, want) {
		t.Errorf("job %s: %q; want it to say %q", j.State, j.Message, want)
	}
}
