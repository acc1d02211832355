package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/tools/internal/dashtool"
)

// victim is alice's job: a step every 50 ms, each printed; it checkpoints
// and exits when asked (a move), and goes on from its checkpoint.
const victim = `import os, sys, time, scavenger
d = scavenger.checkpoint_dir()
step = scavenger.start_step()
while True:
    time.sleep(0.05)
    step += 1
    scavenger.step(samples=8, loss=1.0)
    print("victim tick", step, flush=True)  # not "step N": that would be read as progress
    if scavenger.should_checkpoint():
        p = os.path.join(d, "ck")
        with open(p, "w") as f:
            f.write(str(step))
        scavenger.acknowledge(p)
        break
`

// teleFlood is mallory's job that floods the telemetry socket: as many
// connections as it gets, each bound to its attempt, then records written
// on all of them as fast as it can, for the given seconds.
const teleFlood = `import json, os, socket, sys, time
e = os.environ
end = time.time() + float(sys.argv[1])
def rec(**kw):
    d = {"v": 1, "job": e["SCAV_JOB_ID"], "attempt": int(e["SCAV_ATTEMPT"]), "rank": 0, "world": 1, "step": 1, "t": time.time(), "dt": 0.01, "samples": 1}
    d.update(kw)
    return (json.dumps(d) + "\n").encode()
hello = rec(kind="hello", step=0, token=e["SCAV_TOKEN"])
conns = []
for i in range(3000):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(0.2)
        s.connect(e["SCAV_SOCKET"])
        s.sendall(hello)
        s.setblocking(False)
        conns.append(s)
    except OSError:
        pass
print("telemetry connections", len(conns), flush=True)
step = 1
while time.time() < end and conns:
    for s in list(conns):
        step += 1
        try:
            s.send(rec(step=step) * 20)
        except BlockingIOError:
            pass
        except OSError:
            conns.remove(s)
print("telemetry records up to step", step, flush=True)
`

// printFlood is mallory's job that prints as fast as it can.
const printFlood = `import sys
line = "y" * 200 + "\n"
while True:
    sys.stdout.write(line)
`

// bench is one run's setting.
type bench struct {
	scavd, scavctl, python, self string
	base, state, work            string
	info                         api.Info
	alice, mallory               user
	pid                          int
	parts                        string // what mallory floods
}

// user is an unprivileged user the bench made.
type user struct{ name string }

func run() error {
	scavd := flag.String("scavd", "bin/scavd", "scavd binary")
	scavctl := flag.String("scavctl", "bin/scavctl", "scavctl binary")
	python := flag.String("python", "/usr/bin/python3", "python interpreter of the jobs")
	streams := flag.Int("streams", 20000, "follow streams mallory opens")
	bodies := flag.Int("bodies", 20000, "slow request bodies mallory sends")
	hold := flag.Duration("flood", 40*time.Second, "how long mallory's flood lasts")
	parts := flag.String("parts", "api,telemetry,output", "what mallory floods: api, telemetry, output (comma-separated)")
	flag.Parse()
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root: it makes users and starts a root scavd")
	}
	b := &bench{python: *python}
	var err error
	if b.base, err = os.MkdirTemp("", "benchflood-"); err != nil {
		return err
	}
	defer os.RemoveAll(b.base)
	b.state, b.work = filepath.Join(b.base, "state"), filepath.Join(b.base, "work")
	bin := filepath.Join(b.base, "bin")
	for dir, mode := range map[string]os.FileMode{b.base: 0o711, bin: 0o755, b.work: 0o777 | os.ModeSticky} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(dir, mode); err != nil {
			return err
		}
	}
	self, _ := os.Executable()
	for dst, src := range map[*string]string{&b.scavd: *scavd, &b.scavctl: *scavctl, &b.self: self} {
		*dst = filepath.Join(bin, filepath.Base(src))
		if err := copyFile(src, *dst); err != nil {
			return err
		}
	}
	if b.alice, err = addUser("a"); err != nil {
		return err
	}
	defer delUser(b.alice)
	if b.mallory, err = addUser("m"); err != nil {
		return err
	}
	defer delUser(b.mallory)
	d := exec.Command(b.scavd, "--config", "", "--state-dir", b.state, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--node-sample-every", "0", "--log-level", "error")
	d.Stderr = os.Stderr
	if err := d.Start(); err != nil {
		return fmt.Errorf("start %s: %w", b.scavd, err)
	}
	defer func() {
		_ = d.Process.Signal(syscall.SIGTERM)
		_ = d.Wait()
	}()
	b.pid = d.Process.Pid
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b.info, err = api.ReadDiscovery(b.state); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("scavd did not come up: %w", err)
		}
	}
	b.parts = *parts
	return b.sideBySide(*streams, *bodies, *hold)
}

// sideBySide runs the scenario and prints its tables.
func (b *bench) sideBySide(streams, bodies int, hold time.Duration) error {
	if err := os.WriteFile(filepath.Join(b.work, "victim.py"), []byte(victim), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.work, "tele.py"), []byte(teleFlood), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.work, "print.py"), []byte(printFlood), 0o644); err != nil {
		return err
	}
	job, err := b.start(b.alice, "victim", b.python, "victim.py")
	if err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	mem := &rssWatch{pid: b.pid}
	mem.start()
	defer mem.stop()
	time.Sleep(2 * time.Second)
	before := mem.read()
	unloaded, err := b.probe(300)
	if err != nil {
		return err
	}
	// The flood.
	var floods []string
	for i := range 2 * strings.Count(b.parts, "output") {
		id, err := b.start(b.mallory, fmt.Sprintf("print%d", i), b.python, "print.py")
		if err != nil {
			return err
		}
		floods = append(floods, id)
	}
	if strings.Contains(b.parts, "telemetry") {
		tele, err := b.start(b.mallory, "tele", b.python, "tele.py", strconv.Itoa(int(hold.Seconds())))
		if err != nil {
			return err
		}
		floods = append(floods, tele)
	}
	if !strings.Contains(b.parts, "api") {
		streams, bodies = 0, 0
	}
	var fl flooded
	var wg sync.WaitGroup
	wg.Go(func() {
		out, err := b.as(b.mallory, b.self, "flood", "--api", b.info.API, "--streams", strconv.Itoa(streams), "--bodies", strconv.Itoa(bodies),
			"--hold", hold.String()).Output()
		if err == nil {
			err = json.Unmarshal(out, &fl)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchflood: mallory's API flood: %v\n", err)
		}
	})
	time.Sleep(5 * time.Second) // the flood under way
	during, err := b.probe(300)
	if err != nil {
		return err
	}
	checks := b.aliceActs(job)
	wg.Wait()
	for _, id := range floods {
		_ = b.ctl(b.mallory, "stop", "--grace", "1s", id)
	}
	peak := mem.peak()
	ended := time.Now()
	time.Sleep(30 * time.Second) // for the daemon to let go of what the flood took
	after, err := b.probe(100)
	if err != nil {
		return err
	}
	rssAfter := []rss{mem.read()}
	// Later, once the store's block caches have gone unused and the
	// collections that free them have come; before reading alice's whole
	// step history, which loads the blocks that hold it.
	time.Sleep(time.Until(ended.Add(90 * time.Second)))
	rssAfter = append(rssAfter, mem.read())
	checks = append(checks, b.stepsWhole(job))
	refused := b.refusals()
	b.print(unloaded, during, after, fl, checks, refused, before, peak, rssAfter, streams, bodies)
	return nil
}

// as is argv run as u in the bench's work directory.
func (b *bench) as(u user, argv ...string) *exec.Cmd {
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + u.name, "--regid=" + u.name, "--init-groups", "--"}, argv...)...)
	cmd.Dir = b.work
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + b.work}
	cmd.Stderr = os.Stderr
	return cmd
}

// ctlOut runs scavctl as u and returns its output.
func (b *bench) ctlOut(u user, args ...string) (string, error) {
	cmd := b.as(u, append([]string{"timeout", "120", b.scavctl, "--api", b.info.API}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// ctl runs scavctl as u; its output is in the error.
func (b *bench) ctl(u user, args ...string) error {
	out, err := b.ctlOut(u, args...)
	if err != nil {
		return fmt.Errorf("scavctl %s as %s: %w\n%s", strings.Join(args, " "), u.name, err, out)
	}
	return nil
}

// start submits a job of u's and returns its id.
func (b *bench) start(u user, name string, argv ...string) (string, error) {
	out, err := b.ctlOut(u, append([]string{"run", "-d", "--name", name, "--grace", "2s", "--"}, argv...)...)
	if err != nil {
		return "", fmt.Errorf("start %s's job %s: %w\n%s", u.name, name, err, out)
	}
	fields := strings.Fields(out)
	if len(fields) == 0 {
		return "", fmt.Errorf("start %s's job %s: no id printed", u.name, name)
	}
	return fields[len(fields)-1], nil
}

// probe measures alice's API latency; a probe that could not reach the
// daemon at all counts every call as an error.
func (b *bench) probe(n int) (latency, error) {
	l := latency{N: n, Errors: n}
	out, err := b.as(b.alice, b.self, "probe", "--api", b.info.API, "--n", strconv.Itoa(n)).Output()
	if err == nil {
		err = json.Unmarshal(out, &l)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchflood: alice's probe: %v\n", err)
	}
	return l, nil
}

// check is one thing alice did during the flood, and how it went.
type check struct {
	what, result string
	ok           bool
}

// aliceActs has alice run a job, read her job's logs and move it, during
// the flood.
func (b *bench) aliceActs(job string) []check {
	var out []check
	t := time.Now()
	o, err := b.ctlOut(b.alice, "run", "--", "/bin/echo", "alice was here")
	out = append(out, check{"alice: scavctl run -- /bin/echo", fmt.Sprintf("exit ok in %.1f s", time.Since(t).Seconds()),
		err == nil && strings.Contains(o, "alice was here")})
	if err != nil {
		out[len(out)-1].result = fmt.Sprintf("failed: %v %s", err, firstLine(o))
	}
	o, err = b.ctlOut(b.alice, "logs", job)
	n := strings.Count(o, "victim tick")
	out = append(out, check{"alice: scavctl logs of her job", fmt.Sprintf("%d of its lines", n), err == nil && n > 0})
	t = time.Now()
	o, err = b.ctlOut(b.alice, "move", job, "--workers", "2")
	res := fmt.Sprintf("moved to 2 workers in %.1f s", time.Since(t).Seconds())
	if err != nil {
		res = fmt.Sprintf("failed: %v %s", err, firstLine(o))
	}
	out = append(out, check{"alice: scavctl move of her job", res, err == nil})
	return out
}

// stepsWhole stops alice's job and checks its step records: each rank's
// steps, from the first, with no gap and no copy.
func (b *bench) stepsWhole(job string) check {
	c := check{what: "alice: her job's step records"}
	_ = b.ctl(b.alice, "stop", job)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := api.Dial(ctx, b.info.API, 10*time.Second)
	if err != nil {
		c.result = err.Error()
		return c
	}
	defer cl.Close()
	for {
		j, err := cl.Job(ctx, job)
		if err != nil || j.State.Done() {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A step stored twice by one attempt is a duplicate; one stored again
	// by the next attempt was done again (the move went on from an older
	// checkpoint than the one asked for).
	type key struct {
		attempt int
		step    int64
	}
	seen, byStep := map[key]int{}, map[int64]map[int]bool{}
	var last int64
	err = cl.Steps(ctx, job, false, func(r telemetry.StepRecord) error {
		if r.Rank == 0 {
			seen[key{r.Attempt, r.Step}]++
			if byStep[r.Step] == nil {
				byStep[r.Step] = map[int]bool{}
			}
			byStep[r.Step][r.Attempt] = true
			last = max(last, r.Step)
		}
		return nil
	})
	if err != nil {
		c.result = err.Error()
		return c
	}
	missing, again := 0, map[int64]int{}
	for s := int64(1); s <= last; s++ {
		switch n := len(byStep[s]); {
		case n == 0:
			missing++
		case n > 1:
			again[s] = n
		}
	}
	copies := map[int64]int{}
	for k, n := range seen {
		if n > 1 {
			copies[k.step] = n
		}
	}
	c.result = fmt.Sprintf("steps 1-%d of rank 0: %d missing, %d stored twice by one attempt, %d done again by the next", last, missing, len(copies), len(again))
	if len(copies) > 0 {
		c.result += fmt.Sprintf(" (twice: %s)", stepList(copies))
	}
	if len(again) > 0 {
		c.result += fmt.Sprintf(" (again: %s)", stepList(again))
	}
	c.ok = last > 0 && missing == 0 && len(copies) == 0 && len(again) == 0
	return c
}

// refusals reads scavd's refusal counters from /metrics.
func (b *bench) refusals() map[string]string {
	out := map[string]string{}
	resp, err := httpGet("http://" + b.info.Metrics + "/metrics")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(resp, "\n") {
		for _, m := range []string{"scavenger_api_refused_total", "scavenger_ingest_refused_total", "scavenger_ingest_dropped_records_total"} {
			if strings.HasPrefix(line, m+"{") && !strings.HasSuffix(line, " 0") {
				out[line[:strings.LastIndexByte(line, ' ')]] = line[strings.LastIndexByte(line, ' ')+1:]
			}
		}
	}
	return out
}

// print writes the tables.
func (b *bench) print(unloaded, during, after latency, fl flooded, checks []check, refused map[string]string, before rss, peak int64, rssAfter []rss, streams, bodies int) {
	ratio := during.P99 / unloaded.P99
	verdict := func(ok bool) string {
		if ok {
			return "holds"
		}
		return "**fails**"
	}
	fmt.Println("### Alice's API latency (`jobs`, her own connection)")
	fmt.Println()
	fmt.Println("| phase | calls | errors | p50 ms | p99 ms |")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range []struct {
		name string
		l    latency
	}{{"unloaded", unloaded}, {"during mallory's flood", during}, {"30 s after the flood", after}} {
		fmt.Printf("| %s | %d | %d | %.1f | %.1f |\n", r.name, r.l.N, r.l.Errors, r.l.P50, r.l.P99)
	}
	fmt.Println()
	fmt.Printf("p99 during the flood / unloaded: **%.2f×** (goal ≤ 2×: %s)\n", ratio, verdict(ratio <= 2 && during.Errors == 0))
	fmt.Println()
	fmt.Println("### Mallory's flood")
	fmt.Println()
	fmt.Println("| attempt | tried | served | refused at a bound | body cut | failed | the refusal said |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range []struct {
		name string
		o    outcome
	}{{fmt.Sprintf("follow streams (%d)", streams), fl.Streams}, {fmt.Sprintf("slow request bodies (%d)", bodies), fl.Bodies}} {
		fmt.Printf("| %s | %d | %d | %d | %d | %d | %s |\n", r.name, r.o.Attempts, r.o.Served, r.o.Refused, r.o.Cut, r.o.Failed, strings.ReplaceAll(r.o.Message, "|", "/"))
	}
	fmt.Println("| telemetry socket | her job's 3000 connections, records as fast as it writes | | | | | |")
	fmt.Println("| output stream | two jobs printing as fast as they can | | | | | |")
	fmt.Println()
	fmt.Println("| counter (/metrics) | value |")
	fmt.Println("|---|---|")
	keys := make([]string, 0, len(refused))
	for k := range refused {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Printf("| `%s` | %s |\n", k, refused[k])
	}
	fmt.Println()
	fmt.Println("### Alice, meanwhile")
	fmt.Println()
	fmt.Println("| what | result | unaffected |")
	fmt.Println("|---|---|---|")
	for _, c := range checks {
		fmt.Printf("| %s | %s | %s |\n", c.what, c.result, map[bool]string{true: "yes", false: "**no**"}[c.ok])
	}
	fmt.Println()
	fmt.Println("### scavd's resident memory")
	fmt.Println()
	fmt.Println("| | before the flood | peak | 30 s after | after / before | 90 s after | after / before |")
	fmt.Println("|---|---|---|---|---|---|---|")
	row := func(what string, before int64, peak string, goal bool, after []rss, field func(rss) int64) {
		fmt.Printf("| %s | %.1f MiB | %s |", what, mib(before), peak)
		for _, a := range after {
			r := float64(field(a)) / float64(max(before, 1))
			if goal {
				fmt.Printf(" %.1f MiB | %.2f (goal ≤ 1.20: %s) |", mib(field(a)), r, verdict(r <= 1.2))
			} else {
				fmt.Printf(" %.1f MiB | %.2f |", mib(field(a)), r)
			}
		}
		fmt.Println()
	}
	row("VmRSS", before.total, fmt.Sprintf("%.1f MiB", mib(peak)), true, rssAfter, func(r rss) int64 { return r.total })
	row("of which anonymous (heap, stacks: RssAnon)", before.anon, "", false, rssAfter, func(r rss) int64 { return r.anon })
	row("of which file-backed (the binary's pages: RssFile)", before.file, "", false, rssAfter, func(r rss) int64 { return r.file })
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

// rssWatch samples a process's resident memory every 100 ms.
type rssWatch struct {
	pid     int
	mu      sync.Mutex
	max     int64
	cancel  context.CancelFunc
	stopped chan struct{}
}

func (w *rssWatch) start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.stopped = cancel, make(chan struct{})
	go func() {
		defer close(w.stopped)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			v := w.now()
			w.mu.Lock()
			w.max = max(w.max, v)
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func (w *rssWatch) stop() {
	w.cancel()
	<-w.stopped
}

func (w *rssWatch) peak() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}

// rss is a process's resident memory, KiB: in all (VmRSS), and its
// anonymous (RssAnon) and file-backed (RssFile) parts.
type rss struct{ total, anon, file int64 }

// now is the process's VmRSS, KiB.
func (w *rssWatch) now() int64 { return w.read().total }

// read is the process's resident memory, KiB (zero where it cannot be read).
func (w *rssWatch) read() rss {
	m, _ := dashtool.Status(w.pid)
	return rss{total: m["VmRSS"], anon: m["RssAnon"], file: m["RssFile"]}
}

// addUser makes a system user named after tag.
func addUser(tag string) (user, error) {
	buf := make([]byte, 3)
	_, _ = rand.Read(buf)
	name := "scvb" + tag + hex.EncodeToString(buf)
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		return user{}, fmt.Errorf("useradd %s: %w %s", name, err, out)
	}
	return user{name: name}, nil
}

// delUser removes u, once nothing of theirs runs.
func delUser(u user) {
	for range 100 { // its processes end with the jobs and the scavd the bench stops first
		if exec.Command("userdel", u.name).Run() == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "benchflood: userdel %s failed\n", u.name)
}

// copyFile copies src to dst, mode 0755.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

// httpGet is the body of a GET of url.
func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// stepList names steps, a range when there are many.
func stepList(steps map[int64]int) string {
	keys := slices.Sorted(maps.Keys(steps))
	if len(keys) > 4 {
		return fmt.Sprintf("%d-%d", keys[0], keys[len(keys)-1])
	}
	var out []string
	for _, s := range keys {
		out = append(out, strconv.FormatInt(s, 10))
	}
	return strings.Join(out, ", ")
}
