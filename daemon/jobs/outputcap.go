package jobs

import (
	"fmt"
	"sync"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// A job's output in the output stream is capped, so that one job that
// prints without end can neither evict every other job's history nor grow
// the daemon's memory with what it cannot store as fast:
//
//   - the head: the job's first HeadLines lines (at most HeadBytes) are kept
//     whole, on the job's log subject;
//   - the tail: every later line goes to the job's log-tail subject, of
//     which the stream keeps the newest history.OutputKeepPerSubject
//     messages; a tail line longer than TailLineBytes is cut;
//   - the rate: tail lines are published at most Rate bytes a second (Burst
//     at once); the others wait, up to PendingBytes, and the oldest waiting
//     are dropped past that. The lines still waiting when an attempt ends
//     are published then, whatever the rate: a job's last words are kept.
//
// Every line carries its number in the job's output (LogLine.N), so a reader
// sees what history lost; where the daemon drops lines itself it says so in
// a line of its own (stream "scavd"). The counts live in the job record
// (api.OutputStats), so a resumed job goes on where it was.

// outputPolicy are the limits of one job's output.
type outputPolicy struct {
	HeadLines     int64
	HeadBytes     int64
	TailLineBytes int
	Rate, Burst   float64 // bytes per second; bytes
	PendingBytes  int
}

// defaultOutputPolicy keeps at most about 2000 + 4000 lines of a job (some
// 13 MiB at worst, 1 MiB for lines of 100 bytes), its tail written at 1 MiB/s.
var defaultOutputPolicy = outputPolicy{
	HeadLines: 2000, HeadBytes: 4 << 20, TailLineBytes: 2 << 10,
	Rate: 1 << 20, Burst: 1 << 20, PendingBytes: 256 << 10,
}

// lineOverhead approximates the bytes a published line takes besides its text.
const lineOverhead = 100

// streamDaemon is the LogLine.Stream of the lines the daemon writes itself.
const streamDaemon = "scavd"

// outLine is a line to publish: on the tail subject or the head's.
type outLine struct {
	tail bool
	line telemetry.LogLine
}

// outputCap decides which of a job's output lines are published, where and
// when. It is pure: the caller passes the time and publishes what it returns.
type outputCap struct {
	p       outputPolicy
	st      api.OutputStats
	tokens  float64
	at      time.Time
	pending []telemetry.LogLine
	pBytes  int
	// lost counts the lines dropped since the last note that said so.
	lost int64
}

// newOutputCap continues a job's output from the counts in its record.
func newOutputCap(p outputPolicy, st api.OutputStats) *outputCap {
	return &outputCap{p: p, st: st, tokens: p.Burst}
}

// stats are the counts so far, for the job record.
func (c *outputCap) stats() api.OutputStats { return c.st }

// size is what a line counts for against the limits.
func size(l telemetry.LogLine) int { return len(l.Line) + lineOverhead }

// line takes one line the job wrote at now and returns what to publish now.
func (c *outputCap) line(now time.Time, l telemetry.LogLine) []outLine {
	c.st.Lines++
	l.N = c.st.Lines
	if !c.st.Tail {
		if c.st.Lines <= c.p.HeadLines && c.st.HeadBytes+int64(len(l.Line)) <= c.p.HeadBytes {
			c.st.HeadBytes += int64(len(l.Line))
			return []outLine{{line: l}}
		}
		c.st.Tail = true
		note := l
		note.N, note.Rank, note.Stream = 0, 0, streamDaemon
		note.Line = fmt.Sprintf("scavd: this job's output passed %d lines or %d KiB: from here on, its history keeps the newest %d lines (longer ones cut to %d bytes)",
			c.p.HeadLines, c.p.HeadBytes>>10, history.OutputKeepPerSubject, c.p.TailLineBytes)
		c.pending = append(c.pending, note)
		c.pBytes += size(note)
	}
	if len(l.Line) > c.p.TailLineBytes {
		l.Line = fmt.Sprintf("%s... [scavd: %d bytes cut]", l.Line[:c.p.TailLineBytes], len(l.Line)-c.p.TailLineBytes)
	}
	c.pending = append(c.pending, l)
	c.pBytes += size(l)
	for c.pBytes > c.p.PendingBytes && len(c.pending) > 1 {
		c.pBytes -= size(c.pending[0])
		if c.pending[0].Stream != streamDaemon {
			c.lost++
			c.st.Dropped++
		}
		c.pending = c.pending[1:]
	}
	return c.flush(now, false)
}

// flush returns the waiting lines the rate allows at now, or all of them
// with force, preceded by a note when lines were dropped before them.
func (c *outputCap) flush(now time.Time, force bool) []outLine {
	if !c.at.IsZero() {
		c.tokens = min(c.p.Burst, c.tokens+now.Sub(c.at).Seconds()*c.p.Rate)
	}
	c.at = now
	var out []outLine
	for len(c.pending) > 0 {
		l := c.pending[0]
		if !force && c.tokens < float64(size(l)) {
			break
		}
		if c.lost > 0 {
			out = append(out, outLine{tail: true, line: telemetry.LogLine{Attempt: l.Attempt, Stream: streamDaemon, Time: l.Time,
				Line: fmt.Sprintf("scavd: %d lines of output dropped here: the job wrote faster than %d KiB/s", c.lost, int(c.p.Rate)>>10)}})
			c.lost = 0
		}
		c.tokens -= float64(size(l))
		c.pBytes -= size(l)
		c.pending = c.pending[1:]
		out = append(out, outLine{tail: true, line: l})
	}
	if len(c.pending) == 0 {
		c.pending = nil // let go of the backing array
	}
	return out
}

// outputFlushEvery is how often lines waiting for the rate are looked at
// while an attempt runs and some wait (a job whose output is within the
// rate costs no wake-up).
const outputFlushEvery = 250 * time.Millisecond

// jobOutput publishes one job's output lines as its outputCap decides. The
// launcher's readers call take concurrently; the runner calls flush.
type jobOutput struct {
	mu      sync.Mutex
	cap     *outputCap
	publish func(subject string, l telemetry.LogLine)
	job     string
	// quota charges each line to the job's owner (outputquota.go); over
	// says the lines are being dropped for it.
	quota func(bytes int64) bool
	over  bool
	limit int64
	// wait holds the reader back while the owner's jobs print too fast.
	wait func(n int)
	// waiting is signalled (once however often: it holds one) when lines
	// are left waiting for the rate: the runner then flushes them every
	// outputFlushEvery until none waits.
	waiting chan struct{}
}

// newJobOutput continues job's output from the counts in its record,
// charging each line to its owner's quota q (nil: none).
func newJobOutput(j api.Job, publish func(subject string, l telemetry.LogLine), q *outputQuota) *jobOutput {
	var st api.OutputStats
	if j.Output != nil {
		st = *j.Output
		st.Purged = false
	}
	o := &jobOutput{cap: newOutputCap(defaultOutputPolicy, st), publish: publish, job: j.ID, waiting: make(chan struct{}, 1)}
	if q != nil {
		owner := j.Owner
		o.quota = func(n int64) bool { return q.take(owner, j.ID, n) }
		o.limit = q.limit
		o.wait = func(n int) { q.wait(owner, n) }
	}
	return o
}

// take publishes what the cap lets through of one line, after the owner's
// read rate lets the line in.
func (o *jobOutput) take(l telemetry.LogLine) {
	if o.wait != nil {
		o.wait(len(l.Line) + readLineCost)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.send(o.cap.line(time.Now(), l))
	if len(o.cap.pending) > 0 {
		select {
		case o.waiting <- struct{}{}:
		default:
		}
	}
}

// flush publishes the waiting lines the rate allows now, or all of them,
// and reports whether lines still wait (if not, the next line left waiting
// signals waiting again).
func (o *jobOutput) flush(force bool) (more bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.send(o.cap.flush(time.Now(), force))
	return len(o.cap.pending) > 0
}

// send publishes lines in order, each charged to the owner's quota, which
// drops those past it (the caller holds mu).
func (o *jobOutput) send(lines []outLine) {
	for _, l := range lines {
		subj := telemetry.LogSubject(o.job)
		if l.tail {
			subj = telemetry.LogTailSubject(o.job)
		}
		n := int64(size(l.line))
		if o.quota != nil && !o.quota(n) {
			o.cap.st.Dropped++
			if !o.over { // said once, past the quota (a note of the daemon's own is not charged)
				o.over = true
				note := l.line
				note.N, note.Rank, note.Stream, note.Line = 0, 0, streamDaemon, quotaNote(o.limit)
				o.publish(telemetry.LogTailSubject(o.job), note)
			}
			continue
		}
		o.over = false
		o.cap.st.Bytes += n
		o.publish(subj, l.line)
	}
}

// stats are the counts for the job record.
func (o *jobOutput) stats() api.OutputStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cap.stats()
}
