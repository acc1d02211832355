// Package ingest serves a node's telemetry socket: the unix socket its
// workers write step records, checkpoint acknowledgements and pre-emption
// notices to (newline-delimited JSON, one object a line), and the control
// relay that carries checkpoint requests from NATS back to the workers of a
// job connected here. It validates and batches what it reads, publishes it
// on the job's subjects, and counts what it drops; nothing a worker writes
// can crash or stall it.
//
// ingest.go has the socket and its connections; read.go reads and validates
// a connection's lines into batches; control.go writes back to the workers
// (confirmations, control messages); held.go holds step batches while the
// store cannot write; stream.go publishes into JetStream, trying again; key.go
// makes and checks the tokens that bind a connection to an attempt.
package ingest

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/unixsock"
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
	// closing ends when the server closes (and with it their retries).
	held        held
	closing     context.Context
	stopClosing context.CancelFunc

	wg sync.WaitGroup
}

// Listen creates the unix socket at path (the socket 0600, so that only
// this user's processes can write, or 0666 with Options.Shared) and starts
// serving it. A stale socket file left by a dead daemon is replaced.
func Listen(path string, pub Publisher, o Options) (*Server, error) {
	ln, err := unixsock.Listen(path, "telemetry socket", "choose a shorter --state-dir or --socket", o.Shared)
	if err != nil {
		return nil, err
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
	}
	in.closing, in.stopClosing = context.WithCancel(context.Background())
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
	in.stopClosing()
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
