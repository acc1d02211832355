package ingest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/telemetry"
)

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

// batch collects consecutive valid records of one job; failed says that
// the store refused a batch of the connection since its last confirm.
type batch struct {
	job    string
	buf    []byte
	n      int
	failed bool
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
