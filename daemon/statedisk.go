package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A full state disk. The JetStream store (job records, steps, output and
// events) lives in the state directory; when its file system fills up, a
// stream that fails a write keeps failing (the file store's write error is
// sticky) even once there is room again, and a full JetStream may disable
// itself. The daemon watches for it (the embedded server's log and the
// space left), reports it (a log line, the scavenger_state_disk_full
// metric, Info.StateDisk that `scavctl status` prints), keeps the jobs
// running (their records and output wait: see jobs' finish), and when
// there is room again restarts the embedded JetStream in place, which
// reopens every stream afresh from its files: no restart of scavd.

// Free space on the state disk below diskLow (or 5% of a small disk) is
// "full"; the daemon recovers once it is above diskHigh (or 10%): room for
// the streams to go on.
const (
	diskLow   = 32 << 20
	diskHigh  = 64 << 20
	diskEvery = 2 * time.Second
)

// diskState is what the watch knows of the state disk.
type diskState struct {
	// Free is the space left and Total the disk's size, in bytes (-1: unknown).
	Free, Total int64
	// Fault is set when the store failed a write for want of space since
	// the last recovery; Disabled when JetStream is off.
	Fault, Disabled bool
	// Full is the verdict of the previous look.
	Full bool
}

// diskVerdict says whether the state disk counts as full, and whether the
// store should be restarted now (there is room again after a fault).
type diskVerdict struct {
	Full, Restart bool
	Reason        string
}

// judgeDisk decides, from one look at the state disk, whether it is full
// and whether to restart the store. Pure: a table test holds it.
func judgeDisk(s diskState) diskVerdict {
	low, high := int64(diskLow), int64(diskHigh)
	if s.Total > 0 {
		low, high = min(low, s.Total/20), min(high, s.Total/10)
	}
	known := s.Free >= 0
	broken := s.Fault || s.Disabled
	room := !known || s.Free >= high
	switch {
	case broken && room:
		return diskVerdict{Restart: true, Reason: fmt.Sprintf("the state disk has room again (%s free): restarting the store", mib(s.Free))}
	case broken:
		return diskVerdict{Full: true, Reason: fmt.Sprintf("the state disk is full (%s free): the store cannot write; jobs keep running, their records, steps and output wait for room", mib(s.Free))}
	case known && s.Free < low, s.Full && known && s.Free < high:
		return diskVerdict{Full: true, Reason: fmt.Sprintf("the state disk is almost full (%s free): free space on it, or the store will stop writing", mib(s.Free))}
	}
	return diskVerdict{}
}

// mib formats bytes in MiB ("unknown" when negative).
func mib(b int64) string {
	if b < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// diskWatch watches the state disk of a daemon with an embedded server.
type diskWatch struct {
	log      *zap.Logger
	ns       *server.Server
	dir      string
	storeDir string // the server's StoreDir option, as EnableJetStream wants it
	fault    atomic.Bool
	restarts atomic.Int64
	reopen   func(context.Context) error
	// ckptDirs lists the running jobs' checkpoint directories by job.
	ckptDirs func() map[string]string

	mu      sync.Mutex
	verdict diskVerdict
	free    int64
	since   time.Time
	// ckpt says, for each checkpoint directory short of space, how much
	// it has left and whose it is.
	ckpt map[string]string
}

// noteLog looks at a line of the embedded server's log for a store write
// that failed for want of space.
func (w *diskWatch) noteLog(line string) {
	if strings.Contains(line, "no space left on device") || strings.Contains(line, "insufficient storage") ||
		strings.Contains(line, "out of") && strings.Contains(line, "resources") {
		w.fault.Store(true)
	}
}

// run looks at the state disk every diskEvery until ctx ends.
func (w *diskWatch) run(ctx context.Context) { everyTick(ctx, diskEvery, w.look) }

// everyTick calls fn now and then every d until ctx ends.
func everyTick(ctx context.Context, d time.Duration, fn func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// space returns the free and total bytes of dir's file system (-1: unknown).
func space(dir string) (free, total int64) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return -1, -1
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize
}

// look takes one look and acts on the verdict.
func (w *diskWatch) look(ctx context.Context) {
	w.lookCheckpoints()
	free, total := space(w.dir)
	w.mu.Lock()
	wasFull := w.verdict.Full
	w.mu.Unlock()
	v := judgeDisk(diskState{Free: free, Total: total, Fault: w.fault.Load(), Disabled: !w.ns.JetStreamEnabled(), Full: wasFull})
	if v.Restart {
		if err := w.restart(ctx); err != nil {
			w.log.Error("restart the store after a full state disk; it goes on failing until scavd restarts", zap.Error(err))
			v = diskVerdict{Full: true, Reason: "the state disk had room again, but the store could not be restarted: restart scavd (" + err.Error() + ")"}
		} else {
			w.log.Info(v.Reason+": done; the store writes again", zap.String("dir", w.dir), zap.Int64("free_bytes", free))
			v = diskVerdict{}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case v.Full && !wasFull:
		w.since = time.Now()
		w.log.Error(v.Reason, zap.String("dir", w.dir), zap.Int64("free_bytes", free))
	case !v.Full && wasFull && !v.Restart:
		w.log.Info("the state disk has room again", zap.String("dir", w.dir), zap.Int64("free_bytes", free))
	}
	w.verdict, w.free = v, free
}

// restart restarts the embedded JetStream, which reopens every stream from
// its files (a write error of the old file stores goes with them), and makes
// sure the streams and buckets are there.
func (w *diskWatch) restart(ctx context.Context) error {
	cfg := w.ns.JetStreamConfig()
	if err := w.ns.ShutdownJetStream(); err != nil {
		return fmt.Errorf("shut JetStream down: %w", err)
	}
	jc := &server.JetStreamConfig{StoreDir: w.storeDir}
	if cfg != nil {
		jc.MaxMemory, jc.MaxStore, jc.Domain = cfg.MaxMemory, cfg.MaxStore, cfg.Domain
	}
	w.fault.Store(false)
	if err := w.ns.EnableJetStream(jc); err != nil {
		return fmt.Errorf("start JetStream again: %w", err)
	}
	w.restarts.Add(1)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return w.reopen(ctx)
}

// lookCheckpoints looks at the running jobs' checkpoint directories: one
// short of space (judged as the state disk is) is logged once and reported
// until it has room again. A checkpoint that does not fit fails its write
// and leaves the previous one whole (python/scavenger/checkpoint.py).
func (w *diskWatch) lookCheckpoints() {
	if w.ckptDirs == nil {
		return
	}
	low := map[string]string{}
	for dir, job := range w.ckptDirs() {
		free, total := space(dir)
		w.mu.Lock()
		_, was := w.ckpt[dir]
		w.mu.Unlock()
		if !judgeDisk(diskState{Free: free, Total: total, Full: was}).Full {
			continue
		}
		low[dir] = fmt.Sprintf("checkpoint directory %s of job %s: %s free; a checkpoint that does not fit fails and the previous one stays", dir, job, mib(free))
		if !was {
			w.log.Warn("a checkpoint directory is almost full", zap.String("dir", dir), zap.String("job", job), zap.Int64("free_bytes", free))
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for dir := range w.ckpt {
		if _, still := low[dir]; !still {
			w.log.Info("a checkpoint directory has room again (or its job ended)", zap.String("dir", dir))
		}
	}
	w.ckpt = low
}

// status is the state disk as api.Info tells it, naming the directory:
// empty when all is well.
func (w *diskWatch) status() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.verdict.Full {
		return ""
	}
	return fmt.Sprintf("%s: %s (since %s)", w.dir, w.verdict.Reason, w.since.Format(time.TimeOnly))
}

// checkpoints says which running jobs' checkpoint directories are short of
// space, in order.
func (w *diskWatch) checkpoints() []string {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.ckpt))
	for _, s := range w.ckpt {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// holding says whether the store cannot write for want of space (a write
// failed, or JetStream is off) until the watch restarts it: step records
// are held rather than tried and dropped. An almost full disk still writes.
func (w *diskWatch) holding() bool {
	if w == nil {
		return false
	}
	return w.fault.Load() || (w.ns != nil && !w.ns.JetStreamEnabled())
}

// gauges are the watch's metrics: full (0 or 1), free bytes (-1: unknown)
// and the store restarts so far.
func (w *diskWatch) gauges() (full, free, restarts float64) {
	if w == nil {
		return 0, -1, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.verdict.Full {
		full = 1
	}
	return full, float64(w.free), float64(w.restarts.Load())
}

// startDiskWatch starts the state disk's watch of a daemon that embeds its
// NATS server (one that joins an external server leaves its disk to it).
func (d *Daemon) startDiskWatch() {
	if d.ns == nil || d.cfg.Cluster.Listen != "" {
		return
	}
	d.disk.ckptDirs = func() map[string]string {
		dirs := map[string]string{}
		for _, s := range d.jobs.Running() {
			if s.Job.CheckpointDir != "" {
				dirs[s.Job.CheckpointDir] = s.Job.ID
			}
		}
		return dirs
	}
	d.disk.reopen = func(ctx context.Context) error {
		_, err := openStore(ctx, d.store.JS, d.cfg.Retention, false, d.log)
		return err
	}
	ctx, cancel := context.WithCancel(d.root)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.disk.run(ctx)
	}()
	d.stopDisk = func() { cancel(); <-done }
}

// newDiskWatch is the watch of stateDir's disk; its server is set once the
// embedded server runs.
func newDiskWatch(stateDir string, log *zap.Logger) *diskWatch {
	return &diskWatch{log: log, dir: stateDir, storeDir: filepath.Join(stateDir, "jetstream"), free: -1}
}
