package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// load is what one measurement found.
type load struct {
	name      string
	elapsed   time.Duration
	accepted  int64           // in the measured window
	cpu       time.Duration   // the daemon's, in the measured window
	written   int64           // records, in all
	confirmed int64           // records the daemon confirmed, in all
	peak      int64           // the daemon's RSS, KiB, sampled
	final     api.IngestStats // at the end, once the daemon is done
	before    int64           // records accepted before the load began
	lat       *latencies      // write to confirmation, per record (per step only)
}

// cpuPer1000 is the daemon's CPU milliseconds per 1,000 records accepted.
func (l load) cpuPer1000() float64 {
	if l.accepted == 0 {
		return 0
	}
	return l.cpu.Seconds() * 1e3 / float64(l.accepted) * 1000
}

// conn is a worker's connection: it writes lines and reads the daemon's
// confirmations, timing each record from its write to its confirmation.
type conn struct {
	c         net.Conn
	mu        sync.Mutex
	lines     int64       // written, the hello included
	written   []time.Time // when each line was written (timed connections)
	confirmed int64       // lines the daemon confirmed
	timed     bool
	lat       *latencies
	done      chan struct{}
}

// dial connects to the socket and writes hello.
func dial(socket, hello string, timed bool, lat *latencies) (*conn, error) {
	c, err := net.Dial("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", socket, err)
	}
	w := &conn{c: c, timed: timed, lat: lat, done: make(chan struct{})}
	if err := w.write([]byte(hello), 1); err != nil {
		c.Close()
		return nil, err
	}
	go w.read()
	return w, nil
}

// write writes data, n lines.
func (w *conn) write(data []byte, n int64) error {
	w.mu.Lock()
	if w.timed {
		t := time.Now()
		for i := int64(0); i < n; i++ {
			w.written = append(w.written, t)
		}
	}
	w.lines += n
	w.mu.Unlock()
	_, err := w.c.Write(data)
	return err
}

// read takes the daemon's confirmations until the connection ends.
func (w *conn) read() {
	defer close(w.done)
	r := bufio.NewReader(w.c)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		var m telemetry.Control
		if json.Unmarshal(line, &m) != nil || m.Kind != telemetry.ControlStored {
			continue
		}
		now := time.Now()
		w.mu.Lock()
		if w.timed {
			for i := max(w.confirmed, 1); i < m.Lines && i < int64(len(w.written)); i++ { // line 1 is the hello
				w.lat.add(now.Sub(w.written[i]))
			}
		}
		w.confirmed = max(w.confirmed, m.Lines)
		w.mu.Unlock()
	}
}

// settle waits (up to d) until every line written is confirmed, then
// closes the connection; it returns the records confirmed.
func (w *conn) settle(d time.Duration) int64 {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		w.mu.Lock()
		all := w.confirmed >= w.lines
		w.mu.Unlock()
		if all {
			break
		}
	}
	w.c.Close()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(w.confirmed-1, 0)
}

// latencies collects durations.
type latencies struct {
	mu sync.Mutex
	v  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.v = append(l.v, d)
	l.mu.Unlock()
}

// merge adds o's latencies to l's.
func (l *latencies) merge(o *latencies) {
	o.mu.Lock()
	v := slices.Clone(o.v)
	o.mu.Unlock()
	l.mu.Lock()
	l.v = append(l.v, v...)
	l.mu.Unlock()
}

// quantile is the q-quantile (0 when empty).
func (l *latencies) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.v) == 0 {
		return 0
	}
	sort.Slice(l.v, func(a, b int) bool { return l.v[a] < l.v[b] })
	return l.v[min(len(l.v)-1, int(q*float64(len(l.v))))]
}

// window measures the daemon over d while the writers run: records
// accepted, CPU, peak RSS.
func (d *daemon) window(ctx context.Context, dur time.Duration, l *load) error {
	s0, err0 := d.c.Stats(ctx)
	c0, err1 := d.cpu()
	start := time.Now()
	for end := start.Add(dur); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if v := kib(d.pid)["VmRSS"]; v > l.peak {
			l.peak = v
		}
	}
	c1, err2 := d.cpu()
	s1, err3 := d.c.Stats(ctx)
	l.elapsed = time.Since(start)
	l.accepted, l.cpu = s1.Ingest.Accepted-s0.Ingest.Accepted, c1-c0
	return errors.Join(err0, err1, err2, err3)
}

// start notes the daemon's counters before a load begins.
func (d *daemon) start(ctx context.Context, l *load) error {
	s, err := d.c.Stats(ctx)
	l.before = s.Ingest.Accepted
	return err
}

// took is the number of records the daemon accepted during the load.
func (l load) took() int64 { return l.final.Accepted - l.before }

// finish waits for the daemon to take what the writers handed it and to
// confirm it, then reads its counters.
func (d *daemon) finish(ctx context.Context, l *load, conns []*conn) error {
	for _, w := range conns {
		l.confirmed += w.settle(30 * time.Second)
	}
	for prev := int64(-1); ; prev = l.final.Accepted {
		s, err := d.c.Stats(ctx)
		if err != nil {
			return err
		}
		if l.final = s.Ingest; l.final.Accepted == prev {
			return nil
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// blocks runs one writer per rank of a, each replaying a block of 1,000
// records as fast as the socket takes it, for dur.
func (d *daemon) blocks(ctx context.Context, a attempt, dur time.Duration) (load, error) {
	l := load{name: "blocks", lat: &latencies{}}
	if err := d.start(ctx, &l); err != nil {
		return l, err
	}
	var written atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var conns []*conn
	defer func() {
		for _, w := range conns {
			w.c.Close()
		}
	}()
	for rank := 0; rank < a.world; rank++ {
		w, err := dial(d.socket, d.hello(a, rank), false, nil)
		if err != nil {
			close(stop)
			wg.Wait()
			return l, err
		}
		conns = append(conns, w)
		var b strings.Builder
		t := now()
		const n = 1000
		for s := int64(1); s <= n; s++ {
			b.WriteString(record(a, rank, s, t))
		}
		block := []byte(b.String())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if w.write(block, n) != nil {
					return
				}
				written.Add(n)
			}
		}()
	}
	err := d.window(ctx, dur, &l)
	close(stop)
	wg.Wait()
	l.written = written.Load()
	if err != nil {
		return l, err
	}
	err = d.finish(ctx, &l, conns)
	return l, err
}

// perStep runs one connection per rank of each attempt; each job's ranks
// write one record each per step from step first, rate steps a second,
// together (each job at its own phase), for dur.
func (d *daemon) perStep(ctx context.Context, atts []attempt, rate float64, dur time.Duration, first int64) (load, error) {
	l := load{name: "per step", lat: &latencies{}}
	if err := d.start(ctx, &l); err != nil {
		return l, err
	}
	var written atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var conns []*conn
	defer func() {
		for _, w := range conns {
			w.c.Close()
		}
	}()
	period := time.Duration(float64(time.Second) / rate)
	for i, a := range atts {
		var ranks []*conn
		for rank := 0; rank < a.world; rank++ {
			w, err := dial(d.socket, d.hello(a, rank), true, l.lat)
			if err != nil {
				return l, err
			}
			ranks = append(ranks, w)
		}
		conns = append(conns, ranks...)
		phase := period * time.Duration(i) / time.Duration(len(atts))
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-runCtx.Done():
				return
			case <-time.After(phase):
			}
			tick := time.NewTicker(period)
			defer tick.Stop()
			for step := first; ; step++ {
				t := now()
				for rank, w := range ranks {
					if w.write([]byte(record(a, rank, step, t)), 1) == nil {
						written.Add(1)
					}
				}
				select {
				case <-runCtx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	time.Sleep(time.Second) // every job stepping
	err := d.window(ctx, dur, &l)
	stop()
	wg.Wait()
	l.written = written.Load()
	if err != nil {
		return l, err
	}
	err = d.finish(ctx, &l, conns)
	return l, err
}
