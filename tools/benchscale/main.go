// Command benchscale measures how scavd and scavctl scale with the job
// history, the step history and the running jobs (issue 25), and scavd's
// memory: it prints the tables of docs/bench-scale.md. Histories are made
// fast, by writing job and step records into a daemon's store as a daemon
// would have (see history.go), not by running the jobs; the running jobs
// are real (a python worker that reports 10 steps a second).
//
//	go run ./tools/benchscale --scavd bin/scavd --scavctl bin/scavctl
//
// Every figure is a median of --runs runs (more for a quick command) after
// one to warm up, of the command's wall time from exec to exit (its output
// to /dev/null).
// Commands a build does not have are "n/a", so that an older build's
// binaries can be measured the same way.
package main

import (
	"context"
	"debug/elf"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchscale:", err)
		os.Exit(1)
	}
}

// options are the bench's flags.
type options struct {
	scavd, scavctl, python string
	// base is another build's scavd whose idle memory is measured too
	// (baseName names it).
	base, baseName         string
	jobs, records          []int
	runs, running, samples int
	jobSecs                float64
}

func run() error {
	var o options
	var jobs, records string
	flag.StringVar(&o.scavd, "scavd", "bin/scavd", "scavd binary to measure")
	flag.StringVar(&o.scavctl, "scavctl", "bin/scavctl", "scavctl binary to measure")
	flag.StringVar(&o.python, "python", "/usr/bin/python3", "python of the running jobs' workers")
	flag.StringVar(&o.base, "base-scavd", "", "another build's scavd whose idle memory to measure too")
	flag.StringVar(&o.baseName, "base-name", "base", "what to call the --base-scavd build")
	flag.StringVar(&jobs, "jobs", "10,1000,10000", "job history sizes")
	flag.StringVar(&records, "records", "200,20000,200000", "step history sizes (records of one job)")
	flag.IntVar(&o.runs, "runs", 3, "timed runs of each command (after one to warm up)")
	flag.IntVar(&o.running, "running", 16, "jobs running while `scavctl jobs` is timed")
	flag.IntVar(&o.samples, "samples", 60, "runs of `scavctl jobs` for its p99, idle and under the running jobs")
	flag.Float64Var(&o.jobSecs, "job-seconds", 90, "how long each running job runs")
	flag.Parse()
	var err error
	if o.jobs, err = ints(jobs); err != nil {
		return fmt.Errorf("--jobs: %w", err)
	}
	if o.records, err = ints(records); err != nil {
		return fmt.Errorf("--records: %w", err)
	}
	tmp, err := os.MkdirTemp("", "benchscale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ctx := context.Background()
	b := &bench{o: o, tmp: tmp, loadStart: loadavg()}
	if err := b.memoryAndLoad(ctx); err != nil {
		return err
	}
	if o.base != "" {
		d, err := startScavd(o.base, filepath.Join(tmp, "base"))
		if err != nil {
			return err
		}
		time.Sleep(3 * time.Second)
		b.idleBase = mem(d.cmd.Process.Pid)
		d.stop()
	}
	if err := b.jobHistory(ctx); err != nil {
		return err
	}
	if err := b.stepHistory(ctx); err != nil {
		return err
	}
	b.print()
	return nil
}

// ints reads a comma-separated list of counts.
func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// measuredFlags are the measured build's flags: /metrics on a free port
// (the default port may be taken on a shared machine).
var measuredFlags = []string{"--metrics-listen", "127.0.0.1:0"}

// bench holds what was measured.
type bench struct {
	o   options
	tmp string

	idle, idleHistory memory // at start (empty store), and with the largest job history
	idleBase          memory // the base build's, at start
	loadStart         string
	peakKiB           int64 // VmHWM, the largest of every daemon of the bench
	loadIdle, loadRun []time.Duration

	jobRows  []row
	stepRows []row
}

// row is one figure of a table, one cell per size ("n/a": not this build's).
type row struct {
	name  string
	cells []string
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// cell is a duration in ms, or n/a when the command failed (said on
// standard error).
func cell(d time.Duration, err error) string {
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchscale: n/a:", err)
		return "n/a"
	}
	return ms(d)
}

// memoryAndLoad measures the idle memory of a daemon on an empty store,
// then `scavctl jobs` over many runs, idle and while jobs run.
func (b *bench) memoryAndLoad(ctx context.Context) error {
	state := filepath.Join(b.tmp, "load")
	d, err := startScavd(b.o.scavd, state, measuredFlags...)
	if err != nil {
		return err
	}
	defer d.stop()
	time.Sleep(3 * time.Second) // settled: the first node samples taken
	b.idle = mem(d.cmd.Process.Pid)
	c := ctl{bin: b.o.scavctl, state: state}
	if b.loadIdle, err = c.sample(b.o.samples, "jobs"); err != nil {
		return err
	}
	if err := runJobs(ctx, d, b.o.python, b.tmp, b.o.running, b.o.jobSecs); err != nil {
		return err
	}
	if b.loadRun, err = c.sample(b.o.samples, "jobs"); err != nil {
		return err
	}
	if err := waitIdle(ctx, d); err != nil {
		return err
	}
	b.peak(d)
	return nil
}

// peak notes the daemon's VmHWM.
func (b *bench) peak(d *scavd) { b.peakKiB = max(b.peakKiB, mem(d.cmd.Process.Pid).HWM) }

// jobHistory fills the job history table.
func (b *bench) jobHistory(ctx context.Context) error {
	names := []string{"`scavctl jobs` (ms)", "`scavctl jobs --limit 0`: every job (ms)", "`scavctl status NAME` (ms)",
		"scavd first start on the history (ms)", "scavd ready after a restart (ms)", "state dir (KiB)"}
	rows := make([]row, len(names))
	for i := range rows {
		rows[i].name = names[i]
	}
	for k, n := range b.o.jobs {
		state := filepath.Join(b.tmp, fmt.Sprintf("jobs-%d", n))
		d, err := startScavd(b.o.scavd, state, measuredFlags...)
		if err != nil {
			return err
		}
		nc, js, err := d.store()
		if err == nil {
			err = writeJobs(ctx, js, d.info.Node, n)
			nc.Close()
		}
		d.stop()
		if err != nil {
			return err
		}
		first, err := startScavd(b.o.scavd, state, measuredFlags...) // a store written before the index: it is built
		if err != nil {
			return err
		}
		first.stop()
		d, err = startScavd(b.o.scavd, state, measuredFlags...)
		if err != nil {
			return err
		}
		if k == len(b.o.jobs)-1 { // idle: before any command's garbage
			time.Sleep(3 * time.Second)
			b.idleHistory = mem(d.cmd.Process.Pid)
		}
		c := ctl{bin: b.o.scavctl, state: state}
		rows[0].cells = append(rows[0].cells, cell(c.median(b.o.runs, "jobs")))
		rows[1].cells = append(rows[1].cells, cell(c.median(b.o.runs, "jobs", "--limit", "0")))
		rows[2].cells = append(rows[2].cells, cell(c.median(b.o.runs, "status", targetName)))
		rows[3].cells = append(rows[3].cells, ms(first.ready))
		rows[4].cells = append(rows[4].cells, ms(d.ready))
		b.peak(d)
		d.stop()
		rows[5].cells = append(rows[5].cells, strconv.FormatInt(dirKiB(state), 10))
		_ = os.RemoveAll(state)
	}
	b.jobRows = rows
	return nil
}

// stepHistory fills the step history table.
func (b *bench) stepHistory(ctx context.Context) error {
	names := []string{"`steps -o json` (ms)", "`steps` (table) (ms)", "`steps --summary`, first read (ms)", "`steps --summary` (ms)",
		"`report` (ms)", "`report --format png` (ms)", "`steps --last 20` (ms)"}
	rows := make([]row, len(names))
	for i := range rows {
		rows[i].name = names[i]
	}
	for _, n := range b.o.records {
		state := filepath.Join(b.tmp, fmt.Sprintf("steps-%d", n))
		d, err := startScavd(b.o.scavd, state, measuredFlags...)
		if err != nil {
			return err
		}
		id := fmt.Sprintf("steps-%06x", n)
		nc, js, err := d.store()
		if err == nil {
			err = writeSteps(ctx, js, d.info.Node, id, n)
			nc.Close()
		}
		d.stop()
		if err != nil {
			return err
		}
		if d, err = startScavd(b.o.scavd, state, measuredFlags...); err != nil { // it indexes the record written behind its back
			return err
		}
		c := ctl{bin: b.o.scavctl, state: state}
		firstSummary, ferr := c.run("steps", id, "--summary")
		png := filepath.Join(b.tmp, "report.png")
		for i, args := range [][]string{{"steps", id, "-o", "json"}, {"steps", id}, nil, {"steps", id, "--summary"},
			{"report", id}, {"report", id, "--format", "png", "--out", png}, {"steps", id, "--last", "20"}} {
			if args == nil {
				rows[i].cells = append(rows[i].cells, cell(firstSummary, ferr))
				continue
			}
			rows[i].cells = append(rows[i].cells, cell(c.median(b.o.runs, args...)))
		}
		b.peak(d)
		d.stop()
		_ = os.RemoveAll(state)
	}
	b.stepRows = rows
	return nil
}

// textBytes is the size of the binary's code and read-only data (the
// executable's loaded, file-backed segments), MiB.
func textBytes(path string) float64 {
	f, err := elf.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var n uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_W == 0 {
			n += p.Filesz
		}
	}
	return float64(n) / (1 << 20)
}

// loadavg is the machine's load average over the last minute, 5 and 15.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

// print writes the tables.
func (b *bench) print() {
	fmt.Printf("Load average (1, 5, 15 minutes) at the start: %s; at the end: %s. The machine is shared: the figures are wall times of\n", b.loadStart, loadavg())
	fmt.Printf("processes that wait for CPU too (each a median of %d runs after one to warm up, of up to %d when they take less than %s in all).\n\n",
		b.o.runs, maxRuns, quickTotal)
	fmt.Print(intro)
	header := func(what string, sizes []int) {
		fmt.Printf("| %s |", what)
		for _, n := range sizes {
			fmt.Printf(" %d |", n)
		}
		fmt.Printf("\n|---|%s\n", strings.Repeat("---|", len(sizes)))
	}
	table := func(rows []row) {
		for _, r := range rows {
			fmt.Printf("| %s | %s |\n", r.name, strings.Join(r.cells, " | "))
		}
		fmt.Println()
	}
	fmt.Println("## Job history")
	fmt.Println()
	header("jobs in history", b.o.jobs)
	table(b.jobRows)
	fmt.Println("## Step history (records of one job)")
	fmt.Println()
	header("step records", b.o.records)
	table(b.stepRows)
	fmt.Println("## `scavctl jobs` while jobs run")
	fmt.Println()
	fmt.Println("| | p50 (ms) | p99 (ms) |\n|---|---|---|")
	fmt.Printf("| idle (%d runs) | %s | %s |\n", len(b.loadIdle), ms(quantile(b.loadIdle, 0.5)), ms(quantile(b.loadIdle, 0.99)))
	fmt.Printf("| while %d jobs run, 10 steps/s each (%d runs) | %s | %s |\n", b.o.running, len(b.loadRun), ms(quantile(b.loadRun, 0.5)), ms(quantile(b.loadRun, 0.99)))
	fmt.Println()
	fmt.Println("## scavd memory")
	fmt.Println()
	fmt.Println("| | VmRSS (MiB) | anonymous: heap, stacks (MiB) | file-backed: the binary's pages (MiB) |\n|---|---|---|---|")
	mib := func(k int64) string { return fmt.Sprintf("%.1f", float64(k)/1024) }
	fmt.Printf("| idle, empty store | %s | %s | %s |\n", mib(b.idle.RSS), mib(b.idle.Anon), mib(b.idle.File))
	if n := len(b.o.jobs); n > 0 {
		fmt.Printf("| idle, %d jobs in history | %s | %s | %s |\n", b.o.jobs[n-1], mib(b.idleHistory.RSS), mib(b.idleHistory.Anon), mib(b.idleHistory.File))
	}
	fmt.Printf("| peak over the bench (VmHWM) | %s | | |\n", mib(b.peakKiB))
	if b.o.base != "" {
		fmt.Printf("| idle, empty store: the %s build | %s | %s | %s |\n", b.o.baseName, mib(b.idleBase.RSS), mib(b.idleBase.Anon), mib(b.idleBase.File))
	}
	fmt.Println()
	fmt.Println("| build | code and read-only data (MiB) | packages | allocated as they initialise (MiB) |\n|---|---|---|---|")
	builds := [][2]string{{"this", b.o.scavd}}
	if b.o.base != "" {
		builds = append(builds, [2]string{b.o.baseName, b.o.base})
	}
	for _, bb := range builds {
		initMiB, pkgs := inits(bb[1])
		fmt.Printf("| %s | %.1f | %d | %.1f |\n", bb[0], textBytes(bb[1]), pkgs, initMiB)
	}
	fmt.Println()
	b.targets()
	fmt.Print(notes)
}

// targets prints issue 25's goals against the figures measured.
func (b *bench) targets() {
	fmt.Println("## Targets")
	fmt.Println()
	fmt.Println("| figure | goal | measured | met |\n|---|---|---|---|")
	last := func(r row) (float64, bool) {
		v, err := strconv.ParseFloat(r.cells[len(r.cells)-1], 64)
		return v, err == nil
	}
	firstCell := func(r row) (float64, bool) {
		v, err := strconv.ParseFloat(r.cells[0], 64)
		return v, err == nil
	}
	verdict := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}
	nJobs, nRecs := b.o.jobs[len(b.o.jobs)-1], b.o.records[len(b.o.records)-1]
	for _, i := range []int{0, 2} {
		r := b.jobRows[i]
		v, ok := last(r)
		v0, ok0 := firstCell(r)
		fmt.Printf("| %s at %d jobs | ≤ 100 ms and ≤ 2× its %d-job figure (%.0f ms) | %.0f ms | %s |\n", strings.TrimSuffix(r.name, " (ms)"), nJobs, b.o.jobs[0], v0, v,
			verdict(ok && ok0 && v <= 100 && v <= 2*v0))
	}
	if v, ok := last(b.jobRows[4]); ok {
		fmt.Printf("| scavd ready after a restart, %d jobs | ≤ 1000 ms | %.0f ms | %s |\n", nJobs, v, verdict(v <= 1000))
	}
	for _, i := range []int{3, 4} {
		v, ok := last(b.stepRows[i])
		fmt.Printf("| %s at %d records | ≤ 200 ms | %.0f ms | %s |\n", strings.TrimSuffix(b.stepRows[i].name, " (ms)"), nRecs, v, verdict(ok && v <= 200))
	}
	if tbl, ok := last(b.stepRows[1]); ok {
		js, _ := last(b.stepRows[0])
		fmt.Printf("| `steps` (table) at %d records | no slower than `steps -o json` (%.0f ms) | %.0f ms | %s |\n", nRecs, js, tbl, verdict(tbl <= js))
	}
	idle99, run99 := quantile(b.loadIdle, 0.99), quantile(b.loadRun, 0.99)
	fmt.Printf("| `scavctl jobs` p99 while %d jobs run | ≤ 2× idle p99 (%s ms) | %s ms | %s |\n", b.o.running, ms(idle99), ms(run99), verdict(run99 <= 2*idle99))
	rss := verdict(b.idle.RSS <= 25*1024)
	if b.idle.RSS > 25*1024 && b.idle.Anon <= 25*1024 {
		rss = "**no**: the anonymous part is; the rest is the binary's pages (below)"
	}
	fmt.Printf("| scavd idle RSS | ≤ 25 MiB, or explained | %.1f MiB (anonymous %.1f MiB) | %s |\n", float64(b.idle.RSS)/1024, float64(b.idle.Anon)/1024, rss)
	fmt.Println()
}

// inits sums what the packages of bin allocate as they initialise
// (GODEBUG=inittrace=1): bytes and packages.
func inits(bin string) (mib float64, packages int) {
	cmd := exec.Command(bin, "--help")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, _ := cmd.CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		// init PKG @T ms, T ms clock, B bytes, N allocs
		f := strings.Fields(l)
		if len(f) < 9 || f[0] != "init" || f[8] != "bytes," {
			continue
		}
		n, _ := strconv.ParseFloat(f[7], 64)
		mib += n / (1 << 20)
		packages++
	}
	return mib, packages
}
