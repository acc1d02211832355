// Package ingest serves a node's telemetry socket: the unix socket its
// workers write step records, checkpoint acknowledgements and pre-emption
// notices to (newline-delimited JSON, one object a line), and the control
// relay that carries checkpoint requests from NATS back to the workers of a
// job connected here. It validates and batches what it reads, publishes it
// on the job's subjects, and counts what it drops; nothing a worker writes
// can crash or stall it.
package ingest

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

	"github.com/nats-io/nats.go"
	"github.com/scavenger-ml/scavenger/api"
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
	// DropUnbound counts lines on a connection that no valid hello bound to
	// an attempt (no hello, or a wrong token); DropForged lines that name a
	// job or attempt other than the one their connection is bound to.
	DropUnbound = "unbound"
	DropForged  = "forged"
)

// DropReasons are the reasons Stats counts dropped lines under.
var DropReasons = []string{telemetry.DropOversized, telemetry.DropMalformed, telemetry.DropVersion, telemetry.DropInvalid,
	DropUnbound, DropForged, dropPublish, dropTooMany}

// Verifier says whether token is the token of job's attempt.
type Verifier func(job string, attempt int, token string) bool

// Options configure a Server.
type Options struct {
	Log *zap.Logger
	// Verify checks the token of each connection's hello; a connection's
	// lines count only once a hello with a valid token bound it to an
	// attempt, and only for that attempt.
	Verify Verifier
	// Shared makes the socket writable by every local user (a root
	// daemon, whose users' workers must reach it; the token is what counts).
	Shared bool
	// Steps, when set, publishes the step batches instead of the
	// connection's publisher: one that waits for the stream's
	// acknowledgement and tries again (StreamPublisher), so that no record
	// is lost while a cluster elects a new stream leader. The reading
	// connection waits meanwhile; its worker buffers.
	Steps Publisher
}

// Server serves the node's telemetry socket: workers write newline-delimited
// JSON step records; valid ones are published on their job's step subject,
// batched per read so that one NATS message may carry many records. Bad lines
// are counted and dropped with a rate-limited log line.
type Server struct {
	log    *zap.Logger
	pub    Publisher // acknowledgements and notices
	steps  Publisher // step batches
	verify Verifier
	ln     net.Listener
	path   string

	accepted atomic.Int64
	conns    atomic.Int64
	dropped  map[string]*atomic.Int64

	mu       sync.Mutex
	open     map[net.Conn]struct{}
	peers    map[string]map[*peer]struct{} // connections by the job their worker announced
	closed   bool
	lastWarn map[string]time.Time

	// held keeps the step batches the store refused for want of space;
	// closing is closed when the server closes.
	held    held
	closing chan struct{}

	wg sync.WaitGroup
}

// Listen creates the unix socket at path (the socket 0600, so that only
// this user's processes can write, or 0666 with Options.Shared) and starts
// serving it. A stale socket file left by a dead daemon is replaced.
func Listen(path string, pub Publisher, o Options) (*Server, error) {
	if len(path) > 107 {
		return nil, fmt.Errorf("listen on telemetry socket %s: path is %d bytes, unix sockets allow 107; choose a shorter --state-dir or --socket", path, len(path))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
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
	mode := os.FileMode(0o600)
	if o.Shared {
		mode = 0o666
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("set the mode of telemetry socket %s: %w", path, err)
	}
	in := newServer(pub, o.Log)
	in.verify = o.Verify
	if o.Steps != nil {
		in.steps = o.Steps
	}
	in.ln, in.path = ln, path
	in.wg.Add(1)
	go in.accept()
	go in.publishHeld() // joined by Close (stopHeld)
	return in, nil
}

// newServer makes a Server with its counters, not yet listening.
func newServer(pub Publisher, log *zap.Logger) *Server {
	in := &Server{
		log: log, pub: pub, steps: pub,
		dropped:  make(map[string]*atomic.Int64, len(DropReasons)),
		open:     make(map[net.Conn]struct{}),
		peers:    make(map[string]map[*peer]struct{}),
		lastWarn: make(map[string]time.Time),
		closing:  make(chan struct{}),
	}
	in.held.cond = sync.NewCond(&in.held.mu)
	in.held.done = make(chan struct{})
	for _, r := range DropReasons {
		in.dropped[r] = new(atomic.Int64)
	}
	return in
}

// Path is the socket's file name (what workers get as SCAV_SOCKET).
func (in *Server) Path() string { return in.path }

// Stats returns the counters so far.
func (in *Server) Stats() api.IngestStats {
	s := api.IngestStats{Accepted: in.accepted.Load(), Connections: in.conns.Load(), Dropped: map[string]int64{}}
	for r, c := range in.dropped {
		if n := c.Load(); n > 0 {
			s.Dropped[r] = n
		}
	}
	return s
}

// Close stops accepting, ends the reading side of every connection, waits
// for the readers (each publishes what it had read, confirms it to a worker
// that asked, and closes its connection) and removes the socket. It is
// idempotent.
func (in *Server) Close() {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return
	}
	in.closed = true
	close(in.closing)
	in.ln.Close()
	for c := range in.open {
		if r, ok := c.(interface{ CloseRead() error }); ok {
			_ = r.CloseRead()
		} else {
			c.Close()
		}
	}
	in.mu.Unlock()
	in.stopHeld() // first: a connection may wait for room among the held batches
	in.wg.Wait()
	_ = os.Remove(in.path)
}

func (in *Server) accept() {
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
	conn    net.Conn
	job     string // the job and attempt a valid hello bound it to ("": none)
	attempt int
	confirm bool       // its hello asked for ControlStored messages
	lines   int64      // lines read so far (the reading goroutine's)
	told    int64      // lines confirmed (or queued to be) so far (the reading goroutine's)
	wmu     sync.Mutex // serialises control writes
}

// serve reads one connection until EOF or close. p is the connection's
// state (its conn nil when reading from a plain reader, as the fuzzer does).
func (in *Server) serve(c io.Reader, p *peer) {
	r := bufio.NewReaderSize(c, readBufBytes)
	var b batch
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			p.lines++
			in.drop(telemetry.DropOversized, fmt.Sprintf("line longer than %d bytes", readBufBytes))
			if !discardLine(r) {
				break
			}
			continue
		}
		if len(line) > 0 {
			p.lines++
			in.handle(&b, line, p)
		}
		if err != nil {
			break
		}
		if r.Buffered() == 0 || b.n >= batchRecords || len(b.buf) >= batchBytes {
			in.flush(&b)
			if !in.confirm(p, &b) {
				return
			}
		}
	}
	in.flush(&b)
	in.confirm(p, &b)
}

// confirm tells p's worker, when its hello asked (Confirm), that the daemon
// is done with every line it read so far: at once, or, while step batches
// are held for a full store, once those before it are stored. A batch the
// store did not take makes it false: the connection is then ended, so that
// the worker sends what was not confirmed again on its next connection.
func (in *Server) confirm(p *peer, b *batch) bool {
	failed := b.failed
	b.failed = false
	if !p.confirm || p.conn == nil {
		return true
	}
	if failed {
		return false
	}
	if p.lines == p.told {
		return true
	}
	p.told = p.lines
	msg := telemetry.Control{Kind: telemetry.ControlStored, Lines: p.lines}.Encode()
	// Confirmations are cumulative: one a worker does not take at once
	// (it has not read for thousands of them) is made good by the next,
	// and never holds up the held batches' publisher.
	if !in.held.after(func() { in.write(p, msg, confirmPatience) }) {
		in.write(p, msg, confirmPatience)
	}
	return true
}

// Patience with a worker that does not read: a control message waits a
// second for room on its connection, a confirmation hardly at all.
const (
	controlPatience = time.Second
	confirmPatience = 10 * time.Millisecond
)

// write writes a line to p's worker, giving up after patience (a worker
// that does not read is skipped: the daemon never stalls on one); it
// reports whether the line was written.
func (in *Server) write(p *peer, line []byte, patience time.Duration) bool {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = p.conn.SetWriteDeadline(time.Now().Add(patience))
	n, err := p.conn.Write(line)
	if err != nil {
		in.log.Debug("write to a worker", zap.String("job", p.job), zap.Error(err))
		if n > 0 {
			// Part of a line went out: what follows would not parse. The
			// worker reconnects and sends again what was not confirmed.
			p.conn.Close()
		}
		return false
	}
	return true
}

// handle validates one line: a step joins the batch; a hello registers the
// connection; an ack or a preempt notice is published at once (after the
// steps before it).
func (in *Server) handle(b *batch, line []byte, p *peer) {
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
	switch {
	case rec.Kind == telemetry.KindHello:
		in.bind(p, rec)
		return
	case p.job == "":
		in.drop(DropUnbound, fmt.Sprintf("%s of job %s before a hello with the attempt's token", kindName(rec.Kind), rec.Job))
		return
	case rec.Job != p.job || rec.Attempt != p.attempt:
		in.drop(DropForged, fmt.Sprintf("%s of job %s attempt %d on the connection of job %s attempt %d", kindName(rec.Kind), rec.Job, rec.Attempt, p.job, p.attempt))
		return
	}
	switch rec.Kind {
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

// bind binds p to the job and attempt of a hello whose token is theirs; a
// hello with a wrong token unbinds it.
func (in *Server) bind(p *peer, hello telemetry.StepRecord) {
	ok := in.verify == nil || in.verify(hello.Job, hello.Attempt, hello.Token)
	in.mu.Lock()
	in.unregister(p)
	p.job, p.attempt, p.confirm = "", 0, false
	if ok {
		p.job, p.attempt, p.confirm = hello.Job, hello.Attempt, hello.Confirm
		if in.peers[p.job] == nil {
			in.peers[p.job] = map[*peer]struct{}{}
		}
		in.peers[p.job][p] = struct{}{}
	}
	in.mu.Unlock()
	if !ok {
		in.drop(DropUnbound, fmt.Sprintf("hello of job %s attempt %d without its token", hello.Job, hello.Attempt))
	}
}

// kindName names a record's kind in messages.
func kindName(kind string) string {
	if kind == "" {
		return telemetry.KindStep
	}
	return kind
}

func (in *Server) flush(b *batch) {
	if b.n == 0 {
		return
	}
	if err := in.flushStep(telemetry.StepSubject(b.job), b.buf, b.n); err != nil {
		b.failed = true
		in.dropped[dropPublish].Add(int64(b.n))
		in.warn(dropPublish, fmt.Sprintf("publish %d records of job %s: %v", b.n, b.job, err))
	}
	b.buf, b.n = b.buf[:0], 0
}

// drop counts a rejected line and logs at most once a second per reason.
func (in *Server) drop(reason, detail string) {
	in.dropped[reason].Add(1)
	in.warn(reason, detail)
}

func (in *Server) warn(reason, detail string) {
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
func (in *Server) unregister(p *peer) {
	if set := in.peers[p.job]; set != nil {
		delete(set, p)
		if len(set) == 0 {
			delete(in.peers, p.job)
		}
	}
}

// Connected returns how many connections a hello bound to job.
func (in *Server) Connected(job string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.peers[job])
}

// Send writes a control message to every connected worker of its job and
// returns how many it reached. A worker that does not take the line within a
// second is skipped (and counted out): control never stalls the daemon.
func (in *Server) Send(c telemetry.Control) int {
	in.mu.Lock()
	peers := make([]*peer, 0, len(in.peers[c.Job]))
	for p := range in.peers[c.Job] {
		peers = append(peers, p)
	}
	in.mu.Unlock()
	line := c.Encode()
	n := 0
	for _, p := range peers {
		if !in.write(p, line, controlPatience) {
			in.log.Warn("send control: the worker did not take it", zap.String("job", c.Job), zap.String("kind", c.Kind))
			continue
		}
		n++
	}
	return n
}

// batch collects consecutive valid records of one job; failed says that
// the store refused a batch of the connection since its last confirm.
type batch struct {
	job    string
	buf    []byte
	n      int
	failed bool
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

// Relay forwards the control messages of every job (telemetry.AllControl)
// from nc to the workers of that job connected here; the subscription ends
// with the connection or when unsubscribed.
func (in *Server) Relay(nc *nats.Conn) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(telemetry.AllControl, func(m *nats.Msg) {
		c, err := telemetry.DecodeControl(m.Data)
		if err != nil {
			in.log.Warn("control message", zap.String("subject", m.Subject), zap.Error(err))
			return
		}
		n := in.Send(c)
		in.log.Debug("control sent", zap.String("job", c.Job), zap.String("kind", c.Kind), zap.Int("workers", n))
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", telemetry.AllControl, err)
	}
	return sub, nil
}
