package ingest

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// confirm tells p's worker, when its hello asked (Confirm), that the daemon
// is done with its first lines lines: at once, or, while step batches are
// held for a full store, once those before it are stored. A connection
// whose records the store refused is told nothing more (it is ended, and
// its worker sends what was not confirmed again). It runs in the
// batcher's flush, one at a time.
func (in *Server) confirm(p *peer, lines int64) {
	if !p.confirm || p.conn == nil || p.failed.Load() || lines <= p.told {
		return
	}
	p.told = lines
	msg := telemetry.StoredLine(lines)
	// Confirmations are cumulative: one a worker does not take at once
	// (it has not read for thousands of them) is made good by the next,
	// and never holds up the batcher or the held batches' publisher.
	if !in.held.after(func() { in.tryWrite(p, msg) }) {
		in.tryWrite(p, msg)
	}
}

// tryWrite writes a line to p's worker if its socket takes it now, without
// waiting (a confirmation: the next one makes good one not taken).
func (in *Server) tryWrite(p *peer, line []byte) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	var n int
	var err error
	if !p.conn.use(func(fd int) { n, err = rawWrite(fd, line) }) {
		return
	}
	if err == nil && n < len(line) || err != nil && n > 0 {
		// Part of a line went out: what follows would not parse. The
		// worker reconnects and sends again what was not confirmed.
		p.conn.shutdown(unix.SHUT_RDWR)
	}
}

// controlPatience is how long a control message waits for room on the
// connection of a worker that does not read (a confirmation does not
// wait: tryWrite).
const controlPatience = time.Second

// write writes a line to p's worker, giving up after patience (a worker
// that does not read is skipped: the daemon never stalls on one); it
// reports whether the line was written.
func (in *Server) write(p *peer, line []byte, patience time.Duration) bool {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	n, err := p.conn.write(line, patience)
	if err != nil {
		in.log.Debug("write to a worker", zap.String("job", p.job), zap.Error(err))
		if n > 0 {
			// Part of a line went out: what follows would not parse. The
			// worker reconnects and sends again what was not confirmed.
			p.conn.shutdown(unix.SHUT_RDWR)
		}
		return false
	}
	return true
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

// Progress returns how many connections a hello bound to job, and the
// highest step any of their workers announced in its hello (the step it
// was at when it connected) or sent since.
func (in *Server) Progress(job string) (conns int, step int64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for p := range in.peers[job] {
		step = max(step, p.step.Load())
	}
	return len(in.peers[job]), step
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
