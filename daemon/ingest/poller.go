package ingest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A goroutine per connection costs a wake of the runtime for every record a
// per-step writer sends, and those wakes, not the records, were most of
// what a node's telemetry cost the daemon (issue 25). The poller reads every
// connection from one goroutine: it waits (in epoll_wait, on an epoll
// descriptor of its own) until some connection has data, reads what has
// come, lets the batcher's window pass so that the others' records come
// too, reads again every connection that has data, and publishes the
// batches: a few wakes per window, whatever the connections.
//
// Neither the connections nor the epoll descriptor are in the runtime's
// netpoller: a descriptor there wakes the runtime whenever it becomes
// ready, and a nested epoll becomes ready again with every connection that
// gets data, so the runtime woke for each record even while the poller
// slept through its window (640 wakes a second for 640 records). The
// poller's wait is a blocking system call instead, and nothing waits on
// the epoll descriptor while the poller does not.

// pconn is one connection the poller reads.
type pconn struct {
	p     *peer
	fd    int // p.conn's, which the epoll names until end
	id    int32
	ready bool // the kernel said it has data the poller has not read yet
	hup   bool // the kernel said its worker closed (or shut its side): read to the EOF
	ls    lineSplitter
	b     batch
	last  time.Time // when it last brought bytes
}

// poller reads the socket's connections (see above).
type poller struct {
	in     *Server
	ep     int // the epoll descriptor
	wakeFD int // an eventfd in ep (id 0): wake ends a wait at once
	buf    []byte
	events []unix.EpollEvent

	snap []*pconn // run's: snapshot's slice, used again

	mu    sync.Mutex
	conns map[int32]*pconn // by id, the epoll events' data
	next  int32
	done  chan struct{}
}

func newPoller(in *Server) (*poller, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("telemetry socket: epoll: %w", err)
	}
	wfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err == nil {
		err = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: 0})
		if err != nil {
			unix.Close(wfd)
		}
	}
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("telemetry socket: eventfd: %w", err)
	}
	return &poller{in: in, ep: ep, wakeFD: wfd, buf: make([]byte, readBufBytes), events: make([]unix.EpollEvent, 256),
		conns: map[int32]*pconn{}, done: make(chan struct{})}, nil
}

// wake ends the poller's wait (the server closes).
func (pl *poller) wake() {
	one := [8]byte{1}
	_, _ = unix.Write(pl.wakeFD, one[:])
}

// add registers a connection the server admitted.
func (pl *poller) add(p *peer) error {
	fd := -1
	p.conn.use(func(f int) { fd = f })
	if fd < 0 {
		return errors.New("closed")
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for pl.conns[pl.next] != nil || pl.next == 0 {
		pl.next++ // wraps after 2^31 connections: skip the ids in use
	}
	pc := &pconn{p: p, fd: fd, id: pl.next, last: time.Now()}
	pl.next++
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET, Fd: pc.id}
	if err := unix.EpollCtl(pl.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll add: %w", err)
	}
	pc.ready = true // data may have come before it was added
	pl.conns[pc.id] = pc
	return nil
}

// run reads the connections until the server closes and every connection
// has ended.
func (pl *poller) run() {
	defer close(pl.done)
	in := pl.in
	deadlines := time.Now()
	for {
		closing := in.closing.Err() != nil
		if pl.wait(closing) && !closing {
			// Read at once: an acknowledgement or a notice is published as
			// it is read (a worker that acknowledges a checkpoint exits
			// next, and its exit must not be seen first); the steps wait
			// in the batcher while the other connections' records of this
			// step come.
			pl.readAll(false)
			time.Sleep(in.batch.window)
			pl.collect()
		}
		pl.readAll(closing)
		in.batch.flush()
		pl.endFailed()
		if now := time.Now(); now.Sub(deadlines) >= pollTick || closing {
			deadlines = now
			pl.timeouts(now, closing)
		}
		if closing && pl.empty() {
			return
		}
	}
}

// pollTick is how often the poller checks the connections' deadlines and
// retries connections held back by their user's step bytes; idle, it
// wakes every pollIdle.
const (
	pollTick = 100 * time.Millisecond
	pollIdle = time.Second
)

// wait blocks until a connection has data, or a held-back connection or the
// deadlines are due (at once when closing); it says whether a connection
// has data.
func (pl *poller) wait(closing bool) bool {
	if closing {
		return pl.collect() > 0
	}
	tick := pollIdle
	if pl.pending() {
		tick = pollTick
	}
	n, err := unix.EpollWait(pl.ep, pl.events, int(tick.Milliseconds()))
	if err != nil || n <= 0 {
		return false
	}
	got := pl.mark(pl.events[:n])
	if n == len(pl.events) {
		got += pl.collect()
	}
	return got > 0
}

// collect takes the kernel's ready connections without waiting; it
// returns how many.
func (pl *poller) collect() int {
	total := 0
	for {
		n, err := rawEpollPoll(pl.ep, pl.events)
		if err != nil || n <= 0 {
			return total
		}
		total += pl.mark(pl.events[:n])
		if n < len(pl.events) {
			return total
		}
	}
}

// mark notes the connections evs say are ready; it returns how many.
func (pl *poller) mark(evs []unix.EpollEvent) int {
	got := 0
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, ev := range evs {
		if ev.Fd == 0 { // wake: take its count, so that it is not ready again
			var b [8]byte
			_, _ = unix.Read(pl.wakeFD, b[:])
			continue
		}
		if pc := pl.conns[ev.Fd]; pc != nil {
			pc.ready = true
			pc.hup = pc.hup || ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP) != 0
			got++
		}
	}
	return got
}

// pending says whether a connection is ready but was not read (its user
// waits for step bytes).
func (pl *poller) pending() bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, pc := range pl.conns {
		if pc.ready {
			return true
		}
	}
	return false
}

func (pl *poller) empty() bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return len(pl.conns) == 0
}

// snapshot lists the connections, in buf's array when it has room. The
// array's entries past the list are cleared: a connection that ended is
// not kept by a slot a longer list left (with its batch buffers, up to
// batchRecords records each: a flood's thousands of connections held
// 80 MiB after it ended).
func (pl *poller) snapshot(buf []*pconn) []*pconn {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	clear(buf)
	out := buf[:0]
	for _, pc := range pl.conns {
		out = append(out, pc)
	}
	return out
}

// list lists the connections for run's loops (in its own slice, used
// again: a round allocates nothing for it).
func (pl *poller) list() []*pconn {
	pl.snap = pl.snapshot(pl.snap)
	return pl.snap
}

// readAll reads every ready connection whose user may hand more step bytes,
// until the kernel has nothing more for it; a connection that ended is
// ended here.
func (pl *poller) readAll(closing bool) {
	for _, pc := range pl.list() {
		if !pc.ready || pc.p.failed.Load() {
			continue
		}
		if !closing && !pl.in.mayHand(pc.p) {
			continue // its user waits for step bytes: read it on a later round
		}
		pc.ready = false
		if !pl.read(pc) {
			pl.end(pc)
		}
	}
}

// read reads pc until the kernel has nothing more, or its user is past
// their step bytes; false when it ended.
func (pl *poller) read(pc *pconn) bool {
	for {
		var n int
		var err error
		if !pc.p.conn.use(func(fd int) { n, err = rawRead(fd, pl.buf) }) {
			return false
		}
		switch {
		case errors.Is(err, unix.EAGAIN):
			return true
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil || n == 0:
			return false
		}
		pc.last = time.Now()
		pl.in.feed(&pc.ls, pl.buf[:n], &pc.b, pc.p)
		if pc.p.failed.Load() {
			return false
		}
		if n < len(pl.buf) && !pc.hup {
			// The kernel had no more than this: more data is a new event.
			// A hangup is not: its one event may have come with data
			// this read took, and the EOF behind it is read on now.
			return true
		}
		if !pl.in.mayHand(pc.p) {
			// Its user is past their step bytes: the rest waits for a
			// later round. A worker that writes faster than the poller
			// reads was otherwise read on and on in one round, its
			// user's debt without bound, and its EOF read only once that
			// was paid (under -race: 20 MiB read at a bound of 200 KiB/s).
			pc.ready = true
			return true
		}
	}
}

// endFailed ends the connections whose records the store refused.
func (pl *poller) endFailed() {
	for _, pc := range pl.list() {
		if pc.p.failed.Load() {
			pl.end(pc)
		}
	}
}

// timeouts ends connections past their hello's deadline or silent past the
// idle timeout (all of them when closing).
func (pl *poller) timeouts(now time.Time, closing bool) {
	l := pl.in.limits
	for _, pc := range pl.list() {
		p := pc.p
		reason := ""
		switch {
		case closing:
		case p.job == "" && now.Sub(p.since) > l.HelloTimeout:
			reason = RefusedNoHello
		case p.job != "" && now.Sub(pc.last) > l.IdleTimeout:
			reason = RefusedIdle
		default:
			continue
		}
		if reason != "" {
			pl.in.refuse(reason)
			pl.in.log.Debug("telemetry connection timed out", zap.String("reason", reason), zap.Uint32("uid", p.uid), zap.Int32("pid", p.pid), zap.String("job", p.job))
		}
		pl.end(pc)
	}
}

// end forgets pc and closes its connection, after what it read was handed
// (its records stored and confirmed by the next flush).
func (pl *poller) end(pc *pconn) {
	pl.mu.Lock()
	if pl.conns[pc.id] == nil {
		pl.mu.Unlock()
		return
	}
	delete(pl.conns, pc.id)
	pl.mu.Unlock()
	pl.in.finish(&pc.ls, &pc.b, pc.p)
	pl.in.batch.flush()
	_ = unix.EpollCtl(pl.ep, unix.EPOLL_CTL_DEL, pc.fd, nil) // before the close: the number may be reused
	pl.in.forget(pc.p)
}

// close releases the epoll descriptor and the eventfd, once run has
// returned.
func (pl *poller) close() {
	unix.Close(pl.wakeFD)
	unix.Close(pl.ep)
}
