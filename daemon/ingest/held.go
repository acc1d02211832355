package ingest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap"
)

// ErrStoreFull is what a Publisher returns when the store cannot write for
// want of space (a full state disk): the batch is held, not dropped.
var ErrStoreFull = errors.New("the store cannot write: its disk is full")

// heldMaxBytes bounds the step batches held in memory while the store
// cannot write; past it, the connections that bring more wait (their
// workers' clients queue, then spill to the job's spool directory).
const heldMaxBytes = 64 << 20

// heldBatch is a step batch the store has not taken yet, or (data nil) a
// confirmation to send once the batches before it are stored.
type heldBatch struct {
	subject string
	id      string
	data    []byte
	n       int
	then    func()
}

// held keeps, in order, the step batches the store refused for want of
// space, and its goroutine publishes them once it takes them again. While
// anything is held, new batches queue behind it, so that each job's records
// stay in order.
type held struct {
	mu    sync.Mutex
	cond  *sync.Cond
	q     []heldBatch
	bytes int
	stop  bool
	done  chan struct{}
}

// pending says whether anything is held.
func (h *held) pending() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.q) > 0
}

// hold queues a copy of a batch, waiting while heldMaxBytes are held;
// false when the server is closing (the batch is not taken).
func (h *held) hold(subject, id string, data []byte, n int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for !h.stop && len(h.q) > 0 && h.bytes+len(data) > heldMaxBytes {
		h.cond.Wait()
	}
	if h.stop {
		return false
	}
	h.q = append(h.q, heldBatch{subject: subject, id: id, data: append([]byte(nil), data...), n: n})
	h.bytes += len(data)
	h.cond.Broadcast()
	return true
}

// after queues then, to run once every batch held now is stored; false when
// nothing is held (then may run at once) or the server is closing.
func (h *held) after(then func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop || len(h.q) == 0 {
		return false
	}
	h.q = append(h.q, heldBatch{then: then})
	h.cond.Broadcast()
	return true
}

// holder is a Publisher that knows when the store cannot write.
type holder interface{ Holding() bool }

// IDPublisher is a Publisher that names each message with an id the
// store stores once, however often it is sent (JetStream's Nats-Msg-Id,
// within the stream's duplicate window).
type IDPublisher interface {
	PublishID(subject string, data []byte, id string) error
}

// publishStep publishes one step message with its id, when the publisher
// takes ids.
func (in *Server) publishStep(subject string, data []byte, id string) error {
	if p, ok := in.steps.(IDPublisher); ok {
		return p.PublishID(subject, data, id)
	}
	return in.steps.Publish(subject, data)
}

// Message is one step message of a round (EachPublisher).
type Message struct {
	Subject, ID string
	Data        []byte
}

// EachPublisher is an IDPublisher that also sends a round of messages
// together, trying each once, and says which the store took: a window's
// messages of many jobs then cost the connection to the store one round,
// not one round each (a wake-up of every goroutine on the way, per
// message). errs[i] is msgs[i]'s.
type EachPublisher interface {
	IDPublisher
	PublishEach(msgs []Message) (errs []error)
}

// flushRound publishes a round of step batches, each of its own subject:
// together when the publisher can (EachPublisher) and nothing is held, then
// those the store did not take one by one, as flushStep does. errs[i] is
// round[i]'s error.
func (in *Server) flushRound(round []*pending) []error {
	now := time.Now()
	for _, m := range round {
		in.decoded.put(m.id, m.recs, now) // before: the runner may read the stored message before its acknowledgement comes
	}
	errs := make([]error, len(round))
	ep, ok := in.steps.(EachPublisher)
	h, _ := in.steps.(holder)
	var first []error
	if ok && len(round) > 1 && !in.held.pending() && (h == nil || !h.Holding()) {
		msgs := make([]Message, len(round))
		for i, m := range round {
			msgs[i] = Message{Subject: m.subject, ID: m.id, Data: m.data}
		}
		first = ep.PublishEach(msgs)
	}
	for i, m := range round {
		if first != nil && first[i] == nil {
			in.accepted.Add(int64(m.n))
			continue
		}
		errs[i] = in.flushStep(m.subject, m.data, m.n, m.id) // with its id: a message stored in the first try is stored once
	}
	return errs
}

// flushStep publishes a step batch, or holds it when the store cannot write
// (known beforehand, or from the publish's error) or earlier batches are
// still held; it returns the error of a publish that failed otherwise.
func (in *Server) flushStep(subject string, data []byte, n int, id string) error {
	h, _ := in.steps.(holder)
	if !in.held.pending() && (h == nil || !h.Holding()) {
		err := in.publishStep(subject, data, id)
		if err == nil {
			in.accepted.Add(int64(n))
			return nil
		}
		if !errors.Is(err, ErrStoreFull) && !errors.Is(err, ErrUnacknowledged) {
			return err
		}
		in.log.Warn("holding step records until the store takes them", zap.Error(err))
	}
	if !in.held.hold(subject, id, data, n) {
		return fmt.Errorf("hold %d records: the telemetry socket is closing", n)
	}
	return nil
}

// publishHeld publishes the held batches, oldest first, trying each again
// (retryBackOff) until the store takes it or the server closes.
func (in *Server) publishHeld() {
	h := &in.held
	defer close(h.done)
	for {
		h.mu.Lock()
		for !h.stop && len(h.q) == 0 {
			h.cond.Wait()
		}
		if h.stop {
			lost := 0
			for _, b := range h.q {
				lost += b.n
			}
			h.mu.Unlock()
			if lost > 0 {
				in.dropped[dropPublish].Add(int64(lost))
				in.log.Error("step records held while the store could not write are lost: the daemon is stopping", zap.Int("records", lost))
			}
			return
		}
		b := h.q[0]
		h.mu.Unlock()
		if b.data == nil {
			b.then()
		} else if _, err := backoff.Retry(in.closing, func() (struct{}, error) {
			return struct{}{}, in.publishStep(b.subject, b.data, b.id)
		}, retryBackOff(), backoff.WithMaxElapsedTime(0)); err != nil {
			continue // closing
		}
		in.accepted.Add(int64(b.n))
		h.mu.Lock()
		h.q = h.q[1:]
		h.bytes -= len(b.data)
		if len(h.q) == 0 {
			in.log.Info("the store takes step records again; every held record is published")
		}
		h.cond.Broadcast()
		h.mu.Unlock()
	}
}

// stopHeld ends the held batches' goroutine and waits for it.
func (in *Server) stopHeld() {
	h := &in.held
	h.mu.Lock()
	h.stop = true
	h.cond.Broadcast()
	h.mu.Unlock()
	<-h.done
}
