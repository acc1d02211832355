package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// peer is one worker connection; job is what its worker announced.
type peer struct {
	conn      *sock  // nil: a plain reader's (the fuzzer's and the tests')
	cred      bool   // uid and pid are the kernel's word for the connecting process
	uid       uint32 // (the fuzzer and the tests read plain readers: no cred)
	pid       int32
	job       string // the job and attempt a valid hello bound it to ("": none)
	attempt   int
	session   string       // the client's session, when its hello named one
	confirm   bool         // its hello asked for ControlStored messages
	limits    *Attempt     // what its attempt's records may say (nil: not checked)
	checked   time.Time    // when the attempt was last found running
	gone      time.Time    // when it was first found ended (zero: running)
	lines     int64        // lines read so far (the reader's: the poller's)
	handed    int64        // lines handed to the batcher (the reader's)
	told      int64        // lines confirmed so far (the batcher's flush's)
	failed    atomic.Bool  // a message of its records was not stored: it is ended
	step      atomic.Int64 // the highest step its worker announced (hello) or sent (the poller's; read by Progress)
	wmu       sync.Mutex   // serialises control writes
	since     time.Time    // when it was accepted
	throttled bool         // the poller held it back for its user's step bytes
	refused   bool         // its hello was refused (endWriting): what it writes next ends it
}

// fail ends a connection whose records the store refused: its worker sends
// what was not confirmed again on its next connection. The poller ends it
// (it takes it off its epoll before it closes it).
func (p *peer) fail() { p.failed.Store(true) }

// serve reads r, the lines of one worker (a plain reader: the fuzzer's and
// the tests'; the socket's connections are read by the poller), until EOF.
func (in *Server) serve(r io.Reader, p *peer) {
	var ls lineSplitter
	var b batch
	buf := make([]byte, readBufBytes)
	for !p.failed.Load() {
		n, err := r.Read(buf)
		in.feed(&ls, buf[:n], &b, p)
		if err != nil {
			break
		}
	}
	in.finish(&ls, &b, p)
	in.batch.flush() // what it read is stored (or held) and confirmed
}

// feed handles the complete lines of data a connection brought, then hands
// its batch.
func (in *Server) feed(ls *lineSplitter, data []byte, b *batch, p *peer) {
	ls.feed(data, func(line []byte) {
		if p.failed.Load() {
			return // ended (its user past a bound, its records refused): the rest is not read
		}
		p.lines++
		if p.refused {
			// A worker whose hello was refused reads EOF and connects
			// again later. One that writes on is not read: the line is
			// dropped undecoded, and the connection ends.
			in.drop(DropUnbound, fmt.Sprintf("a line on a connection whose hello was refused (uid %d pid %d): it is ended", p.uid, p.pid))
			p.fail()
			return
		}
		in.handle(b, line, p)
		if b.n >= batchRecords || len(b.buf) >= batchBytes {
			in.hand(p, b)
		}
	}, func() {
		p.lines++
		in.drop(telemetry.DropOversized, fmt.Sprintf("line longer than %d bytes", readBufBytes))
	})
	in.hand(p, b)
}

// finish handles the last line of a connection that ended without its
// newline, and hands what is left.
func (in *Server) finish(ls *lineSplitter, b *batch, p *peer) {
	if len(ls.carry) > 0 && !ls.skip {
		p.lines++
		in.handle(b, ls.carry, p)
		ls.carry = ls.carry[:0]
	}
	in.hand(p, b)
}

// lineSplitter cuts a connection's bytes into lines, carrying an
// incomplete one to the next bytes; a line longer than readBufBytes is
// dropped (skipped to its end).
type lineSplitter struct {
	carry []byte
	skip  bool
}

// feed calls line for each complete line of data (its newline included)
// and oversized once for each line longer than readBufBytes.
func (ls *lineSplitter) feed(data []byte, line func([]byte), oversized func()) {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if !ls.skip {
				ls.carry = append(ls.carry, data...)
				if len(ls.carry) >= readBufBytes {
					oversized()
					ls.carry, ls.skip = ls.carry[:0], true
				}
			}
			return
		}
		l := data[:i+1]
		data = data[i+1:]
		switch {
		case ls.skip:
			ls.skip = false
			continue
		case len(ls.carry) > 0:
			l = append(ls.carry, l...)
			ls.carry = ls.carry[:0]
			if len(l) > readBufBytes {
				oversized()
				continue
			}
		}
		line(l)
	}
}

// hand gives the connection's batch to the batcher, once its user may
// write that much (throttle); a batch whose connection is closing for good
// is dropped (its worker sends it again).
func (in *Server) hand(p *peer, b *batch) {
	if b.n == 0 && p.lines == p.handed {
		return
	}
	if b.n > 0 && !in.throttle(p, len(b.buf)) {
		in.marks.untake(b.refs)
		b.buf, b.n, b.recs, b.refs = b.buf[:0], 0, b.recs[:0], b.refs[:0]
		p.fail()
		return
	}
	p.handed = p.lines
	in.batch.hand(p, b)
}

// handle validates one line: a step joins the batch; a hello binds the
// connection; an ack or a preempt notice is published at once (after the
// steps before it are stored).
func (in *Server) handle(b *batch, line []byte, p *peer) {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if len(line) == 0 {
		return // an empty line: the client's keepalive
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
		in.bind(b, p, rec)
		return
	case p.job == "":
		in.drop(DropUnbound, fmt.Sprintf("%s of job %s before a hello with the attempt's token", kindName(rec.Kind), rec.Job))
		return
	case rec.Job != p.job || rec.Attempt != p.attempt:
		in.drop(DropForged, fmt.Sprintf("%s of job %s attempt %d on the connection of job %s attempt %d", kindName(rec.Kind), rec.Job, rec.Attempt, p.job, p.attempt))
		return
	}
	if !in.inRange(p, &rec) {
		return
	}
	switch rec.Kind {
	case telemetry.KindEnd: // the spool's (daemon/jobs/spool.go); a daemon that supervises the worker knows its end
		return
	case telemetry.KindAck, telemetry.KindPreempt:
		in.hand(p, b)
		in.batch.flush()
		subject := telemetry.AckSubject(rec.Job)
		if rec.Kind == telemetry.KindPreempt {
			subject = telemetry.PreemptSubject(rec.Job)
		}
		if err := in.pub.Publish(subject, line); err != nil {
			in.drop(dropPublish, fmt.Sprintf("publish %s of job %s: %v", rec.Kind, rec.Job, err))
		}
		return
	}
	var ref markRef
	if p.session != "" {
		var isNew bool
		ref, isNew = in.marks.take(markKey{job: rec.Job, attempt: rec.Attempt, rank: rec.Rank, session: p.session}, rec.Step, time.Now())
		if !isNew {
			in.drop(DropDuplicate, fmt.Sprintf("step %d of rank %d of job %s attempt %d again (sent again after a stall or a restart)", rec.Step, rec.Rank, rec.Job, rec.Attempt))
			return
		}
	}
	if rec.Step > p.step.Load() {
		p.step.Store(rec.Step) // only the poller writes it
	}
	if b.job != rec.Job {
		in.hand(p, b)
		b.job = rec.Job
	}
	b.buf = append(b.buf, line...)
	b.buf = append(b.buf, '\n')
	b.recs = append(b.recs, rec)
	b.n++
	if ref.m != nil {
		b.refs = append(b.refs, ref)
	}
}

// inRange checks a record against what its attempt can have made by now
// (when the server knows its attempts); a record of an attempt that ended
// more than Limits.Grace ago is refused too.
func (in *Server) inRange(p *peer, rec *telemetry.StepRecord) bool {
	if p.limits == nil {
		return true
	}
	now := time.Now()
	if now.Sub(p.checked) >= time.Second {
		p.checked = now
		if _, ok := in.attempts(in.closing, p.job, p.attempt); ok {
			p.gone = time.Time{}
		} else if p.gone.IsZero() {
			p.gone = now
		}
	}
	if !p.gone.IsZero() && now.Sub(p.gone) > in.limits.Grace {
		in.drop(DropEnded, fmt.Sprintf("%s of job %s attempt %d, which ended %s ago", kindName(rec.Kind), rec.Job, rec.Attempt, now.Sub(p.gone).Round(time.Second)))
		return false
	}
	if err := p.limits.check(rec, now); err != nil {
		in.drop(DropOutOfRange, fmt.Sprintf("%s of job %s attempt %d rank %d: %v", kindName(rec.Kind), rec.Job, rec.Attempt, rec.Rank, err))
		return false
	}
	return true
}

// bind binds p to the job and attempt of a hello whose token is theirs,
// whose attempt runs and whose job has room for another connection. A
// hello with a wrong token unbinds it (and a user past Limits.BadTokens
// is cut off); one of an attempt that ended, or past ConnsPerJob, ends the
// connection's writing side (so that a worker that could not bind tries
// again later, on a new connection).
func (in *Server) bind(b *batch, p *peer, hello telemetry.StepRecord) {
	in.hand(p, b) // the records before it belong to the binding before
	in.mu.Lock()
	in.unregister(p)
	p.job, p.attempt, p.confirm, p.session, p.limits = "", 0, false, "", nil
	in.mu.Unlock()
	if in.verify != nil && !in.mayTryToken(p) {
		// Past the bound, a hello is not even checked: admission counts
		// the user's wrong tokens only as their hellos are read, and a
		// window's worth of connections may have been admitted meanwhile.
		in.refuse(RefusedBadTokens)
		p.fail()
		return
	}
	if in.verify != nil && !in.verify(hello.Job, hello.Attempt, hello.Token) {
		if !in.badToken(p, hello) {
			p.fail()
		}
		return
	}
	var limits *Attempt
	if in.attempts != nil {
		a, ok := in.attempts(in.closing, hello.Job, hello.Attempt)
		if !ok {
			in.drop(DropEnded, fmt.Sprintf("hello of job %s attempt %d, which is not running", hello.Job, hello.Attempt))
			in.refuse(RefusedEnded)
			in.endWriting(p)
			return
		}
		limits = &a
		if err := a.check(&hello, time.Now()); err != nil {
			in.drop(DropOutOfRange, fmt.Sprintf("hello of job %s attempt %d rank %d: %v", hello.Job, hello.Attempt, hello.Rank, err))
			return
		}
		if hello.Session != "" && a.Started.Before(in.started) {
			in.seed(hello.Job, hello.Attempt)
		}
	}
	in.mu.Lock()
	full := len(in.peers[hello.Job]) >= in.limits.ConnsPerJob
	if !full {
		p.job, p.attempt, p.confirm, p.session, p.limits = hello.Job, hello.Attempt, hello.Confirm, hello.Session, limits
		p.checked, p.gone = time.Now(), time.Time{}
		step := hello.Step // where its worker is (Progress), within what the attempt can have done
		if limits != nil {
			step = min(step, limits.maxStep(p.checked))
		}
		p.step.Store(step)
		if in.peers[p.job] == nil {
			in.peers[p.job] = map[*peer]struct{}{}
		}
		in.peers[p.job][p] = struct{}{}
	}
	in.mu.Unlock()
	if full {
		in.refuse(RefusedJobConns)
		in.warn(RefusedJobConns, fmt.Sprintf("job %s has %d connections bound: a hello more is refused", hello.Job, in.limits.ConnsPerJob))
		in.endWriting(p)
	}
}

// storedTimeout bounds the read of an attempt's stored records for its
// seeds (the poller waits for it, once per attempt of a previous daemon).
const storedTimeout = 5 * time.Second

// seed seeds the marks of job's attempt, which ran before the server
// started, from the store, once: a worker's first records on its new
// connection may be those the previous daemon stored but did not confirm.
func (in *Server) seed(job string, attempt int) {
	if in.stored == nil || !in.marks.toSeed(job, attempt, time.Now()) {
		return
	}
	ctx, cancel := context.WithTimeout(in.closing, storedTimeout)
	defer cancel()
	stored, err := in.stored(ctx, job, attempt)
	if err != nil {
		in.log.Warn("read the records a previous daemon stored, to drop their copies; copies of its last ones may be stored again",
			zap.String("job", job), zap.Int("attempt", attempt), zap.Error(err))
	}
	in.marks.seed(job, attempt, stored, time.Now())
}

// endWriting ends the daemon's side of p, so that its worker reads EOF and
// connects again later; if it writes on, its lines are counted and the
// connection ended (feed).
func (in *Server) endWriting(p *peer) {
	p.refused = true
	if p.conn != nil {
		p.wmu.Lock()
		p.conn.shutdown(unix.SHUT_WR)
		p.wmu.Unlock()
	}
}

// kindName names a record's kind in messages.
func kindName(kind string) string {
	if kind == "" {
		return telemetry.KindStep
	}
	return kind
}

// batch collects consecutive valid records of one job read from a
// connection, before it is handed to the batcher.
type batch struct {
	job  string
	buf  []byte
	n    int
	recs []telemetry.StepRecord // buf's lines, decoded
	refs []markRef
}

// drop counts a rejected line and logs at most once a second per reason.
func (in *Server) drop(reason, detail string) {
	in.dropped[reason].Add(1)
	in.warn(reason, detail)
}

// warn logs a line dropped (or a connection refused, by a reason of
// RefusedReasons), at most once a second per reason, with the count so far.
func (in *Server) warn(reason, detail string) {
	now := time.Now()
	in.mu.Lock()
	last := in.lastWarn[reason]
	ok := now.Sub(last) >= time.Second
	if ok {
		in.lastWarn[reason] = now
	}
	in.mu.Unlock()
	if !ok {
		return
	}
	if c := in.refused[reason]; c != nil {
		in.log.Warn("telemetry bound", zap.String("reason", reason), zap.String("detail", truncate(detail, 200)),
			zap.Int64("refused_total", c.Load()))
		return
	}
	in.log.Warn("dropped telemetry", zap.String("reason", reason), zap.String("detail", truncate(detail, 200)),
		zap.Int64("dropped_total", in.dropped[reason].Load()))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
