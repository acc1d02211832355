// Package ingest serves a node's telemetry socket: the unix socket its
// workers write step records, checkpoint acknowledgements and pre-emption
// notices to (newline-delimited JSON, one object a line), and the control
// relay that carries checkpoint requests from NATS back to the workers of a
// job connected here. It validates and batches what it reads, publishes it
// on the job's subjects, and counts what it drops; nothing a worker writes
// can crash or stall it.
//
// Every connection is bound: per user and per job (connections, step
// bytes, wrong tokens), by a deadline for its hello and one for silence,
// and by what its attempt can have made (limits.go); a token stops binding
// once its attempt has ended. Records sent again after a stall are stored
// once (dedupe.go).
//
// ingest.go has the socket and its connections; read.go reads and validates
// a connection's lines into batches; batch.go gathers the batches of every
// connection into one message per job every few milliseconds; control.go
// writes back to the workers (confirmations, control messages); held.go
// holds step batches while the store cannot write; stream.go publishes into
// JetStream, trying again; limits.go and dedupe.go hold the bounds and the
// marks; key.go makes and checks the tokens that bind a connection to an
// attempt.
package ingest

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/unixsock"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// Publisher is what ingest needs of NATS: publish a payload on a subject.
type Publisher interface {
	Publish(subject string, data []byte) error
}

const (
	batchRecords = 512
	batchBytes   = 256 << 10
	readBufBytes = 64 << 10
	dropPublish  = "publish_failed"
	dropTooMany  = "too_many_connections"
	// DropUnbound counts lines on a connection that no valid hello bound to
	// an attempt (no hello, or a wrong token); DropForged lines that name a
	// job or attempt other than the one their connection is bound to.
	DropUnbound = "unbound"
	DropForged  = "forged"
	// DropOutOfRange counts records that passed the schema but not their
	// attempt's bounds (a world above its workers, a step it cannot have
	// reached yet, a time outside its life); DropEnded lines of an attempt
	// that has ended (a hello, or records past Limits.Grace); DropDuplicate
	// records a client sent again after a stall, whose first copy was taken.
	DropOutOfRange = "out_of_range"
	DropEnded      = "attempt_ended"
	DropDuplicate  = "duplicate"
)

// DropReasons are the reasons Stats counts dropped lines under.
var DropReasons = []string{telemetry.DropOversized, telemetry.DropMalformed, telemetry.DropVersion, telemetry.DropInvalid,
	DropUnbound, DropForged, DropOutOfRange, DropEnded, DropDuplicate, dropPublish, dropTooMany}

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
	// is lost while a cluster elects a new stream leader. The batcher
	// waits meanwhile; the workers buffer. One that takes ids
	// (IDPublisher) gets each message's, the same on every try.
	Steps Publisher
	// Attempts, when set, says which attempts run and what their records
	// may say: a hello binds only a running attempt's connection, and
	// records outside its bounds are refused (limits.go).
	Attempts Attempts
	// Limits bound connections, step bytes and wrong tokens per user and
	// job (zero fields: DefaultLimits).
	Limits Limits
	// Window is how long records wait to be published together (0:
	// DefaultWindow).
	Window time.Duration
	// Stored, when set with Attempts, reads what the store holds of an
	// attempt that ran before this server started: its records that a
	// previous daemon may have stored without confirming them (dedupe.go).
	Stored Stored
}

// Stored returns the steps of the last records the store holds of job's
// attempt, by rank: those stored in the last seconds before its newest
// (StoredSpan), which is as far back as a record can have been stored and
// not confirmed when the daemon that stored it died.
type Stored func(ctx context.Context, job string, attempt int) (map[int][]int64, error)

// StoredSpan is how far before the newest stored record of a job Stored
// reads: a record is confirmed within a batch window and a store's
// acknowledgement of its storing, far less than this.
const StoredSpan = 10 * time.Second

// Server serves the node's telemetry socket: workers write newline-delimited
// JSON step records; valid ones are published on their job's step subject,
// gathered across connections so that one NATS message carries many
// records. Bad lines are counted and dropped with a rate-limited log line.
type Server struct {
	log      *zap.Logger
	pub      Publisher // acknowledgements and notices
	steps    Publisher // step batches
	verify   Verifier
	attempts Attempts
	stored   Stored
	started  time.Time // when the server started: attempts that ran before are seeded
	limits   Limits
	ln       *os.File // the listening socket, accepted from raw (sock.go)
	path     string
	batch    *batcher
	poll     *poller
	marks    marks
	decoded  decoded // the records of the step messages published lately

	accepted atomic.Int64
	conns    atomic.Int64
	dropped  map[string]*atomic.Int64
	refused  map[string]*atomic.Int64

	mu       sync.Mutex
	open     map[*sock]struct{}
	peers    map[string]map[*peer]struct{} // connections by the job their worker announced
	users    map[uint32]*user
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
	in.verify, in.attempts, in.stored, in.limits = o.Verify, o.Attempts, o.Stored, o.Limits.withDefaults()
	in.started = time.Now()
	in.batch = newBatcher(in, o.Window)
	if o.Steps != nil {
		in.steps = o.Steps
	}
	// A listener's own raw descriptor cannot wait (its Read says EINVAL);
	// a copy as a file can. The listener goes at once; Close removes the
	// socket's file.
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	in.ln, err = ul.File()
	ln.Close()
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("telemetry socket %s: %w", path, err)
	}
	if in.poll, err = newPoller(in); err != nil {
		in.ln.Close()
		_ = os.Remove(path)
		return nil, err
	}
	in.path = path
	in.wg.Add(1)
	go in.accept()
	go in.poll.run()    // joined by Close (poll.done)
	go in.publishHeld() // joined by Close (stopHeld)
	return in, nil
}

// newServer makes a Server with its counters, not yet listening.
func newServer(pub Publisher, log *zap.Logger) *Server {
	in := &Server{
		log: log, pub: pub, steps: pub,
		dropped:  make(map[string]*atomic.Int64, len(DropReasons)),
		refused:  make(map[string]*atomic.Int64, len(RefusedReasons)),
		open:     make(map[*sock]struct{}),
		peers:    make(map[string]map[*peer]struct{}),
		users:    make(map[uint32]*user),
		lastWarn: make(map[string]time.Time),
		limits:   DefaultLimits,
	}
	in.batch = newBatcher(in, DefaultWindow)
	in.closing, in.stopClosing = context.WithCancel(context.Background())
	in.held.cond = sync.NewCond(&in.held.mu)
	in.held.done = make(chan struct{})
	for _, r := range DropReasons {
		in.dropped[r] = new(atomic.Int64)
	}
	for _, r := range RefusedReasons {
		in.refused[r] = new(atomic.Int64)
	}
	return in
}

// Path is the socket's file name (what workers get as SCAV_SOCKET).
func (in *Server) Path() string { return in.path }

// Stats returns the counters so far.
func (in *Server) Stats() api.IngestStats {
	s := api.IngestStats{Accepted: in.accepted.Load(), Connections: in.conns.Load(), Dropped: map[string]int64{}, Refused: map[string]int64{}}
	for r, c := range in.dropped {
		if n := c.Load(); n > 0 {
			s.Dropped[r] = n
		}
	}
	for r, c := range in.refused {
		if n := c.Load(); n > 0 {
			s.Refused[r] = n
		}
	}
	return s
}

// Close stops accepting, ends the reading side of every connection, waits
// for the poller (it publishes what each had read, confirms it to a worker
// that asked, and closes the connection) and removes the socket. It is
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
		c.shutdown(unix.SHUT_RD) // the poller reads its EOF and ends it
	}
	in.poll.wake()
	in.mu.Unlock()
	in.stopHeld() // first: a connection may wait for room among the held batches
	in.wg.Wait()
	<-in.poll.done // it reads what the connections hold, stores and confirms it, and ends them
	in.poll.close()
	_ = os.Remove(in.path)
}

func (in *Server) accept() {
	defer in.wg.Done()
	for {
		c, err := acceptSock(in.ln)
		if err != nil {
			if in.closing.Err() != nil {
				return // Close closed the listener
			}
			in.log.Warn("accept on telemetry socket", zap.Error(err))
			time.Sleep(50 * time.Millisecond)
			continue
		}
		p := &peer{conn: c, since: time.Now()}
		p.uid, p.pid, p.cred = c.cred()
		in.mu.Lock()
		reason, ok := in.admit(p)
		if in.closed {
			reason, ok = "", false
		}
		if ok {
			in.open[c] = struct{}{}
		}
		in.mu.Unlock()
		if !ok {
			c.release()
			switch reason {
			case dropTooMany:
				in.drop(dropTooMany, fmt.Sprintf("connection refused: %d connections open", in.limits.Conns))
			case RefusedUserConns:
				in.refuse(reason)
				in.warn(reason, fmt.Sprintf("connection of uid %d (pid %d) refused: it holds %d", p.uid, p.pid, in.limits.ConnsPerUser))
			case RefusedBadTokens:
				in.refuse(reason)
			}
			continue
		}
		in.conns.Add(1)
		if err := in.poll.add(p); err != nil {
			in.log.Warn("read a telemetry connection", zap.Error(err))
			in.mu.Lock()
			in.forgetLocked(p)
			in.mu.Unlock()
		}
	}
}

// forget releases what a connection held and closes it.
func (in *Server) forget(p *peer) {
	in.mu.Lock()
	in.forgetLocked(p)
	in.mu.Unlock()
}

// forgetLocked is forget with in.mu held.
func (in *Server) forgetLocked(p *peer) {
	delete(in.open, p.conn)
	in.unregister(p)
	in.release(p)
	in.conns.Add(-1)
	p.conn.release()
}
