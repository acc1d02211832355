// Command benchingest measures one scavd's telemetry ingest, as workers
// use it: every connection's hello asks for confirmations (the "stored"
// lines the python client waits for), and the writers read them.
//
//   - blocks: writers on one job's attempt replay a pre-built block of
//     1,000 records as fast as the socket takes it (the ceiling);
//   - per step: many connections (jobs × ranks, the ranks of a job in step,
//     as DDP keeps them) each write one record per step at a fixed rate,
//     as a real trainer does; the daemon's CPU per 1,000 records and the
//     time from a record's write to its confirmation are measured.
//
// It starts the scavd binary it is given with a temporary state directory,
// runs real jobs on it (sleeping workers: the records come from here, bound
// to those jobs' attempts by their tokens), and stops everything at the end.
//
//	go run ./tools/benchingest --scavd bin/scavd [--writers 8] [--duration 10s] [--jobs 8 --ranks 8 --rate 10 --step-duration 20s]
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/ingest"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/tools/internal/dashtool"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchingest:", err)
		os.Exit(1)
	}
}

func run() error {
	scavd := flag.String("scavd", "bin/scavd", "scavd binary to measure")
	writers := flag.Int("writers", 8, "blocks: concurrent writers, one connection each")
	duration := flag.Duration("duration", 10*time.Second, "blocks: how long the writers write")
	jobs := flag.Int("jobs", 8, "per step: jobs")
	ranks := flag.Int("ranks", 8, "per step: ranks of each job, one connection each")
	rate := flag.Float64("rate", 10, "per step: steps a second of each rank")
	stepDuration := flag.Duration("step-duration", 20*time.Second, "per step: how long the ranks step, each round")
	stepRounds := flag.Int("step-rounds", 3, "per step: rounds, on new connections each (the figure is their median: a shared machine's noise lasts longer than one)")
	idleWindow := flag.Duration("idle", 10*time.Second, "how long scavd's idle CPU (jobs running, no telemetry) is measured (/proc counts it in 10 ms ticks)")
	flag.Parse()

	state, err := os.MkdirTemp("", "benchingest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	cmd := exec.Command(*scavd, "--state-dir", state, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--log-level", "warn", "--local-slots", strconv.Itoa(max(*writers, *ranks)))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", *scavd, err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	ctx := context.Background()
	info, err := discover(state)
	if err != nil {
		return err
	}
	c, err := api.Dial(ctx, info.API, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	key, err := ingest.LoadKey(filepath.Join(state, "telemetry.key"))
	if err != nil {
		return err
	}
	d := &daemon{c: c, key: key, socket: info.Socket, pid: cmd.Process.Pid, dir: state}
	defer d.stopJobs()

	block, err := d.jobs(ctx, 1, *writers)
	if err != nil {
		return err
	}
	stepJobs, err := d.jobs(ctx, *jobs, *ranks)
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	idle := kib(d.pid)["VmRSS"]
	idleCPU, err := d.idleCPU(*idleWindow)
	if err != nil {
		return err
	}
	// Per step first: the memory the blocks make the store hold would
	// still be there after them.
	var rounds []load
	for r := range max(*stepRounds, 1) {
		first := 1 + int64(r)*int64(*rate*(stepDuration.Seconds()+10))
		s, err := d.perStep(ctx, stepJobs, *rate, *stepDuration, first)
		if err != nil {
			return err
		}
		rounds = append(rounds, s)
	}
	s := median(rounds)
	b, err := d.blocks(ctx, block[0], *duration)
	if err != nil {
		return err
	}
	hwm := kib(d.pid)["VmHWM"]

	fmt.Printf("## Blocks: %d writers on one attempt, 1,000-record blocks as fast as the socket takes them, confirmations read\n\n", *writers)
	fmt.Printf("| measure | value |\n|---|---|\n")
	fmt.Printf("| measured window | %s |\n", b.elapsed.Truncate(time.Millisecond))
	fmt.Printf("| records accepted in the window | %d |\n", b.accepted)
	fmt.Printf("| **ingest throughput** | **%.0f records/s** |\n", float64(b.accepted)/b.elapsed.Seconds())
	fmt.Printf("| scavd CPU per 1,000 records | %.1f ms |\n", b.cpuPer1000())
	fmt.Printf("| records written / accepted / confirmed / dropped in all | %d / %d / %d / %d |\n", b.written, b.took(), b.confirmed, dropped(b.final))
	fmt.Printf("\n## Per step: %d connections (%d jobs × %d ranks), one record a step at %.0f steps/s each, confirmations read\n\n", *jobs**ranks, *jobs, *ranks, *rate)
	fmt.Printf("| measure | value |\n|---|---|\n")
	fmt.Printf("| measured window | %s |\n", s.elapsed.Truncate(time.Millisecond))
	fmt.Printf("| records accepted in the window | %d (%.0f records/s) |\n", s.accepted, float64(s.accepted)/s.elapsed.Seconds())
	fmt.Printf("| **scavd CPU per 1,000 records** | **%.1f ms** (goal <= 50 ms) |\n", s.cpuPer1000())
	fmt.Printf("| each round (the figure is their median) | %s |\n", eachRound(rounds))
	fmt.Printf("| of which idle (scavd's CPU with no telemetry, %.1f ms/s, over the same time) | %.1f ms |\n", idleCPU*1e3, idleCPU*s.elapsed.Seconds()*1e6/float64(max(s.accepted, 1)))
	fmt.Printf("| write to confirmation: median, p99, max | %s, %s, %s |\n", ms(s.lat.quantile(0.5)), ms(s.lat.quantile(0.99)), ms(s.lat.quantile(1)))
	fmt.Printf("| records written / accepted / confirmed / dropped in all | %d / %d / %d / %d |\n", s.written, s.took(), s.confirmed, dropped(s.final))
	fmt.Printf("\n## Memory\n\n| measure | value |\n|---|---|\n")
	fmt.Printf("| scavd RSS idle (jobs running, no telemetry) | %.1f MiB |\n", float64(idle)/1024)
	fmt.Printf("| scavd RSS under per-step load (peak sampled) | %.1f MiB |\n", float64(s.peak)/1024)
	fmt.Printf("| scavd RSS under block load (peak sampled, VmHWM) | %.1f MiB, %.1f MiB |\n", float64(b.peak)/1024, float64(hwm)/1024)
	fmt.Print(reading)
	var errs []error
	for _, l := range append([]load{b}, rounds...) {
		if l.took() != l.written || l.confirmed != l.written {
			errs = append(errs, fmt.Errorf("%s: accepted %d, confirmed %d of %d records written", l.name, l.took(), l.confirmed, l.written))
		}
	}
	return errors.Join(errs...)
}

// reading is what the doc says of the figures that a reader would compare
// with older builds'.
const reading = `
## Reading the figures

- Every record counted here was stored in JetStream and its storing
  acknowledged before the writer's confirmation. The figures of builds
  before issue 21 (docs/bench-ingest.md at 9e601d6) came from an ingest
  that published on core NATS, with no acknowledgement and no
  confirmation: the records it counted had not been shown to be stored.
- Under block load the RSS is mostly JetStream's file store: it keeps each
  message block's cache for 10 s after its last use (nats-server's
  defaultCacheBufferExpiration, not settable per stream), so its memory
  follows the write rate, and the Go collector's headroom adds to it. A
  node's real load, one record a step, writes a small fraction of those
  bytes (the per-step row).
- The per-step CPU has three parts. The idle share: what scavd spends
  with these jobs running and no telemetry (its timers, the node sampler,
  the reaper's safety scan), spread over the records. A share per record:
  reading it (a syscall per record when each rank writes its own), decoding
  it, writing its confirmation (another syscall). A share per JetStream
  message, one per job and batch window: the store, its acknowledgement
  and the message's delivery to the job's runner once stored (a window's
  messages of all jobs go to the store together, and a message's records
  to the job's controller at once). A record is decoded once, by the
  socket: the runner takes the socket's records of each stored message
  and hands them on to the job's step digest. The window
  (ingest.DefaultWindow) trades the confirmation's delay for fewer
  messages; a job with more ranks per message costs less per record.
`

// median is the round with the median CPU per 1,000 records (the lower of
// the two middle ones for an even count), with every round's latencies.
func median(rounds []load) load {
	sorted := slices.Clone(rounds)
	slices.SortFunc(sorted, func(a, b load) int { return cmp.Compare(a.cpuPer1000(), b.cpuPer1000()) })
	m := sorted[(len(sorted)-1)/2]
	all := &latencies{}
	for _, r := range rounds {
		all.merge(r.lat)
	}
	m.lat = all
	return m
}

// eachRound lists the rounds' CPU per 1,000 records in the order they ran.
func eachRound(rounds []load) string {
	out := make([]string, len(rounds))
	for i, r := range rounds {
		out[i] = fmt.Sprintf("%.1f ms", r.cpuPer1000())
	}
	return strings.Join(out, ", ")
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

func dropped(s api.IngestStats) int64 {
	var n int64
	for _, v := range s.Dropped {
		n += v
	}
	return n
}

// discover waits for the daemon on state to write its discovery file.
func discover(state string) (api.Info, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := api.ReadDiscovery(state)
		if err == nil {
			return info, nil
		}
		if time.Now().After(deadline) {
			return info, fmt.Errorf("scavd did not come up: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// daemon is the scavd under measurement.
type daemon struct {
	c       *api.Client
	key     ingest.Key
	socket  string
	pid     int
	dir     string
	started []string
}

// attempt is a running job's attempt that connections bind to.
type attempt struct {
	job     string
	attempt int
	world   int
}

// jobs starts n jobs of world sleeping workers each and waits until each
// runs.
func (d *daemon) jobs(ctx context.Context, n, world int) ([]attempt, error) {
	var out []attempt
	for i := 0; i < n; i++ {
		j, err := d.c.Run(ctx, api.RunRequest{
			Name: fmt.Sprintf("bench-%d-%d", len(d.started), world), Command: []string{"sleep", "3600"}, Dir: d.dir,
			Env: []string{"PATH=/usr/bin:/bin"}, Config: plugins.Config{Workers: world, GlobalBatch: 32 * world},
		})
		if err != nil {
			return nil, fmt.Errorf("run a bench job: %w", err)
		}
		d.started = append(d.started, j.ID)
		for deadline := time.Now().Add(30 * time.Second); j.State != api.StateRunning; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("bench job %s is %s after 30s", j.ID, j.State)
			}
			if j, err = d.c.Job(ctx, j.ID); err != nil {
				return nil, err
			}
		}
		out = append(out, attempt{job: j.ID, attempt: j.Attempt, world: world})
	}
	return out, nil
}

// stopJobs stops the jobs started.
func (d *daemon) stopJobs() {
	for _, id := range d.started {
		_, _ = d.c.Stop(context.Background(), id, time.Second)
	}
}

// hello is the line that binds a connection to a's rank, asking for
// confirmations.
func (d *daemon) hello(a attempt, rank int) string {
	return fmt.Sprintf(`{"v":1,"kind":"hello","job":%q,"attempt":%d,"rank":%d,"world":%d,"step":0,"t":%.6f,"token":%q,"confirm":true}`+"\n",
		a.job, a.attempt, rank, a.world, now(), d.key.Token(a.job, a.attempt))
}

// record is the step record of a's rank at step, with the fields the torch
// client sends.
func record(a attempt, rank int, step int64, t float64) string {
	return fmt.Sprintf(`{"v":1,"job":%q,"attempt":%d,"rank":%d,"world":%d,"step":%d,"t":%.6f,"dt":0.0251,"samples":32,"local_batch":32,"global_batch":%d,"micro":1,"compute_s":0.0212,"sync_s":0.0039,"loss":2.3051,"local_sqr":0.8711,"avg_sqr":0.3145}`+"\n",
		a.job, a.attempt, rank, a.world, step, t, 32*a.world)
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// cpu is the daemon's user and system CPU time so far.
func (d *daemon) cpu() (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(d.pid), "stat"))
	if err != nil {
		return 0, err
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the line.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", d.pid, len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(u+s) * tick, nil
}

// idleCPU is the daemon's CPU seconds a second while nothing is written.
func (d *daemon) idleCPU(over time.Duration) (float64, error) {
	c0, err := d.cpu()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(over)
	c1, err := d.cpu()
	return (c1 - c0).Seconds() / time.Since(start).Seconds(), err
}

// kib is pid's memory fields, KiB (none when /proc cannot be read).
func kib(pid int) map[string]int64 {
	m, _ := dashtool.Status(pid)
	return m
}
