package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// Publisher is what ingest needs of NATS: publish a payload on a subject.
type Publisher interface {
	Publish(subject string, data []byte) error
}

const (
	maxIngestConns = 4096
	batchRecords   = 512
	batchBytes     = 256 << 10
	readBufBytes   = 64 << 10
	dropPublish    = "publish_failed"
	dropTooMany    = "too_many_connections"
)

var dropReasons = []string{telemetry.DropOversized, telemetry.DropMalformed, telemetry.DropVersion, telemetry.DropInvalid, dropPublish, dropTooMany}

// Ingest serves the node's telemetry socket: workers write newline-delimited
// JSON step records; valid ones are published on their job's step subject,
// batched per read so that one NATS message may carry many records. Bad lines
// are counted and dropped with a rate-limited log line; nothing a worker
// writes can crash or stall the daemon.
type Ingest struct {
	log  *zap.Logger
	pub  Publisher
	ln   net.Listener
	path string

	accepted atomic.Int64
	conns    atomic.Int64
	dropped  map[string]*atomic.Int64

	mu       sync.Mutex
	open     map[net.Conn]struct{}
	peers    map[string]map[*peer]struct{} // connections by the job their worker announced
	closed   bool
	lastWarn map[string]time.Time

	wg sync.WaitGroup
}

// ListenIngest creates the unix socket at path (its directory made 0700 and
// the socket 0600, so that only this user's processes can write) and starts
// serving it. A stale socket file left by a dead daemon is replaced.
func ListenIngest(path string, pub Publisher, log *zap.Logger) (*Ingest, error) {
	if len(path) > 107 {
		return nil, fmt.Errorf("listen on telemetry socket %s: path is %d bytes, unix sockets allow 107; choose a shorter --state-dir or --socket", path, len(path))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create socket directory for %s: %w", path, err)
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("listen on telemetry socket %s: another daemon is serving it", path)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on telemetry socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict telemetry socket %s: %w", path, err)
	}
	in := newIngest(pub, log)
	in.ln, in.path = ln, path
	in.wg.Add(1)
	go in.accept()
	return in, nil
}

// newIngest makes an Ingest with its counters, not yet listening.
func newIngest(pub Publisher, log *zap.Logger) *Ingest {
	in := &Ingest{
		log: log, pub: pub,
		dropped:  make(map[string]*atomic.Int64, len(dropReasons)),
		open:     make(map[net.Conn]struct{}),
		peers:    make(map[string]map[*peer]struct{}),
		lastWarn: make(map[string]time.Time),
	}
	for _, r := range dropReasons {
		in.dropped[r] = new(atomic.Int64)
	}
	return in
}

// Path is the socket's file name (what workers get as SCAV_SOCKET).
func (in *Ingest) Path() string { return in.path }

// Stats returns the counters so far.
func (in *Ingest) Stats() IngestStats {
	s := IngestStats{Accepted: in.accepted.Load(), Connections: in.conns.Load(), Dropped: map[string]int64{}}
	for r, c := range in.dropped {
		if n := c.Load(); n > 0 {
			s.Dropped[r] = n
		}
	}
	return s
}

// Close stops accepting, closes every connection, waits for the readers
// (each publishes what it had read) and removes the socket. It is idempotent.
func (in *Ingest) Close() {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return
	}
	in.closed = true
	in.ln.Close()
	for c := range in.open {
		c.Close()
	}
	in.mu.Unlock()
	in.wg.Wait()
	_ = os.Remove(in.path)
}

func (in *Ingest) accept() {
	defer in.wg.Done()
	for {
		c, err := in.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			in.log.Warn("accept on telemetry socket", zap.Error(err))
			time.Sleep(50 * time.Millisecond)
			continue
		}
		in.mu.Lock()
		if in.closed || len(in.open) >= maxIngestConns {
			in.mu.Unlock()
			c.Close()
			in.drop(dropTooMany, "connection refused: too many open connections")
			continue
		}
		in.open[c] = struct{}{}
		in.mu.Unlock()
		in.conns.Add(1)
		in.wg.Add(1)
		go func() {
			defer in.wg.Done()
			p := &peer{conn: c}
			in.serve(c, p)
			in.mu.Lock()
			delete(in.open, c)
			in.unregister(p)
			in.mu.Unlock()
			in.conns.Add(-1)
			c.Close()
		}()
	}
}

// peer is one worker connection; job is what its worker announced.
type peer struct {
	conn net.Conn
	job  string
	wmu  sync.Mutex // serialises control writes
}

// serve reads one connection until EOF or close. p is the connection's
// writable side (nil when reading from a plain reader, as the fuzzer does).
func (in *Ingest) serve(c io.Reader, p *peer) {
	r := bufio.NewReaderSize(c, readBufBytes)
	var b batch
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			in.drop(telemetry.DropOversized, fmt.Sprintf("line longer than %d bytes", readBufBytes))
			if !discardLine(r) {
				break
			}
			continue
		}
		if len(line) > 0 {
			in.handle(&b, line, p)
		}
		if err != nil {
			break
		}
		if r.Buffered() == 0 || b.n >= batchRecords || len(b.buf) >= batchBytes {
			in.flush(&b)
		}
	}
	in.flush(&b)
}

// handle validates one line: a step joins the batch; a hello registers the
// connection; an ack or a preempt notice is published at once (after the
// steps before it).
func (in *Ingest) handle(b *batch, line []byte, p *peer) {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if len(line) == 0 {
		return
	}
	rec, err := telemetry.DecodeStep(line)
	if err != nil {
		var de *telemetry.DecodeError
		if errors.As(err, &de) {
			in.drop(de.Kind, de.Detail)
		} else {
			in.drop(telemetry.DropMalformed, err.Error())
		}
		return
	}
	if p != nil && p.job != rec.Job {
		in.mu.Lock()
		in.unregister(p)
		p.job = rec.Job
		if in.peers[p.job] == nil {
			in.peers[p.job] = map[*peer]struct{}{}
		}
		in.peers[p.job][p] = struct{}{}
		in.mu.Unlock()
	}
	switch rec.Kind {
	case telemetry.KindHello:
		return
	case telemetry.KindAck, telemetry.KindPreempt:
		in.flush(b)
		subject := telemetry.AckSubject(rec.Job)
		if rec.Kind == telemetry.KindPreempt {
			subject = telemetry.PreemptSubject(rec.Job)
		}
		if err := in.pub.Publish(subject, line); err != nil {
			in.drop(dropPublish, fmt.Sprintf("publish %s of job %s: %v", rec.Kind, rec.Job, err))
		}
		return
	}
	if b.job != rec.Job {
		in.flush(b)
		b.job = rec.Job
	}
	b.buf = append(b.buf, line...)
	b.buf = append(b.buf, '\n')
	b.n++
}

func (in *Ingest) flush(b *batch) {
	if b.n == 0 {
		return
	}
	if err := in.pub.Publish(telemetry.StepSubject(b.job), b.buf); err != nil {
		in.dropped[dropPublish].Add(int64(b.n))
		in.warn(dropPublish, fmt.Sprintf("publish %d records of job %s: %v", b.n, b.job, err))
	} else {
		in.accepted.Add(int64(b.n))
	}
	b.buf, b.n = b.buf[:0], 0
}

// drop counts a rejected line and logs at most once a second per reason.
func (in *Ingest) drop(reason, detail string) {
	in.dropped[reason].Add(1)
	in.warn(reason, detail)
}

func (in *Ingest) warn(reason, detail string) {
	now := time.Now()
	in.mu.Lock()
	last := in.lastWarn[reason]
	ok := now.Sub(last) >= time.Second
	if ok {
		in.lastWarn[reason] = now
	}
	in.mu.Unlock()
	if ok {
		in.log.Warn("dropped telemetry", zap.String("reason", reason), zap.String("detail", truncate(detail, 200)),
			zap.Int64("dropped_total", in.dropped[reason].Load()))
	}
}

// unregister forgets p's job; in.mu must be held.
func (in *Ingest) unregister(p *peer) {
	if set := in.peers[p.job]; set != nil {
		delete(set, p)
		if len(set) == 0 {
			delete(in.peers, p.job)
		}
	}
}

// Send writes a control message to every connected worker of its job and
// returns how many it reached. A worker that does not take the line within a
// second is skipped (and counted out): control never stalls the daemon.
func (in *Ingest) Send(c telemetry.Control) int {
	in.mu.Lock()
	peers := make([]*peer, 0, len(in.peers[c.Job]))
	for p := range in.peers[c.Job] {
		peers = append(peers, p)
	}
	in.mu.Unlock()
	line := c.Encode()
	n := 0
	for _, p := range peers {
		p.wmu.Lock()
		_ = p.conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, err := p.conn.Write(line)
		p.wmu.Unlock()
		if err != nil {
			in.log.Warn("send control", zap.String("job", c.Job), zap.String("kind", c.Kind), zap.Error(err))
			continue
		}
		n++
	}
	return n
}

// batch collects consecutive valid records of one job.
type batch struct {
	job string
	buf []byte
	n   int
}

// discardLine skips the rest of an over-long line; false at end of input.
func discardLine(r *bufio.Reader) bool {
	for {
		_, err := r.ReadSlice('\n')
		if err == nil {
			return true
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return false
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
