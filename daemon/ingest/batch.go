package ingest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// A trainer writes one record a step, so a node's connections each bring a
// record at a time; a JetStream message per record costs the daemon more
// than the record (issue 25). The batcher gathers what every connection
// hands it into one message per job and publishes them together, at most
// Window after the first record came, or at once when batchBytes are
// waiting: a per-step writer then costs what a block writer does, and no
// confirmation waits longer than the window and the store. A job's records
// keep the order each connection wrote them in.

// DefaultWindow is how long the batcher gathers records before it
// publishes them. Every window with records costs the daemon its wakes and
// a message per job whatever the records, so a longer one costs less per
// record (make bench-ingest measures the per-step cost; at 5 ms it was
// about twice 50 ms's). A step's records reach the store up to a window
// later, which nothing that reads them notices: the clients do not wait
// for their confirmations, and acknowledgements and notices do not wait
// for the window.
const DefaultWindow = 50 * time.Millisecond

// maxPendingBytes bounds the records waiting in the batcher; past it, a
// connection that hands more publishes what waits itself first.
const maxPendingBytes = 8 << 20

// pending is one message being gathered: records of one job.
type pending struct {
	subject, id string
	data        []byte
	n           int
	recs        []telemetry.StepRecord // data's lines, decoded
	peers       []*peer                // the connections whose records it holds
	refs        []markRef              // its records' marks
}

// msgSize is a message's bytes and records.
type msgSize struct{ bytes, recs int }

// maxSizes bounds batcher.sizes (jobs that ended leave theirs behind).
const maxSizes = 4096

// confirmation is a connection's count of lines to confirm once what it
// handed before is stored.
type confirmation struct {
	p     *peer
	lines int64
}

// batcher gathers the connections' step records into messages.
type batcher struct {
	in     *Server
	window time.Duration
	nonce  string // makes the messages' ids unique across daemons

	mu       sync.Mutex
	msgs     []*pending
	open     map[string]*pending // the message of each subject still taking records
	confirms []confirmation
	bytes    int
	seq      uint64
	// sizes is the size of each subject's last message published: the
	// next one is made that large at once, not grown record by record.
	sizes map[string]msgSize

	flushMu sync.Mutex // one flush at a time, so that messages keep their order
}

func newBatcher(in *Server, window time.Duration) *batcher {
	if window <= 0 {
		window = DefaultWindow
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return &batcher{in: in, window: window, nonce: hex.EncodeToString(b), open: map[string]*pending{}}
}

// hand takes a connection's batch (and, when its hello asked, the count of
// its lines to confirm once the batch is stored) and empties it.
func (bt *batcher) hand(p *peer, b *batch) {
	bt.mu.Lock()
	if bt.bytes >= maxPendingBytes {
		bt.mu.Unlock()
		bt.flush() // the store is slower than the connections: this one waits for it
		bt.mu.Lock()
	}
	if b.n > 0 {
		m := bt.open[b.job]
		if m == nil || len(m.data)+len(b.buf) > batchBytes {
			bt.seq++
			subject := telemetry.StepSubject(b.job)
			sz := bt.sizes[subject]
			m = &pending{subject: subject, id: bt.nonce + "-" + strconv.FormatUint(bt.seq, 36),
				data: make([]byte, 0, max(sz.bytes, len(b.buf))), recs: make([]telemetry.StepRecord, 0, max(sz.recs, len(b.recs)))}
			bt.open[b.job] = m
			bt.msgs = append(bt.msgs, m)
		}
		m.data = append(m.data, b.buf...)
		m.n += b.n
		m.recs = append(m.recs, b.recs...)
		m.refs = append(m.refs, b.refs...)
		if k := len(m.peers); k == 0 || m.peers[k-1] != p {
			m.peers = append(m.peers, p)
		}
		bt.bytes += len(b.buf)
	}
	if p.confirm {
		bt.confirms = append(bt.confirms, confirmation{p: p, lines: p.lines})
	}
	bt.mu.Unlock()
	b.buf, b.n, b.recs, b.refs = b.buf[:0], 0, b.recs[:0], b.refs[:0]
}

// flush publishes every message waiting (holding it when the store cannot
// write), then confirms what it stored to the connections that asked. A
// message the store refused fails the connections whose records it held:
// they are ended, so that their workers send those records again, and
// those records are taken off their marks.
func (bt *batcher) flush() {
	bt.flushMu.Lock()
	defer bt.flushMu.Unlock()
	bt.mu.Lock()
	msgs, confirms := bt.msgs, bt.confirms
	bt.msgs, bt.confirms, bt.bytes = nil, nil, 0
	clear(bt.open)
	if bt.sizes == nil || len(bt.sizes) > maxSizes {
		bt.sizes = map[string]msgSize{}
	}
	for _, m := range msgs {
		bt.sizes[m.subject] = msgSize{len(m.data), len(m.recs)}
	}
	bt.mu.Unlock()
	in := bt.in
	for _, round := range rounds(msgs) {
		for i, err := range in.flushRound(round) {
			if err == nil {
				continue
			}
			m := round[i]
			in.dropped[dropPublish].Add(int64(m.n))
			in.warn(dropPublish, fmt.Sprintf("publish %d records on %s: %v", m.n, m.subject, err))
			in.marks.untake(m.refs)
			for _, p := range m.peers {
				p.fail()
			}
		}
	}
	for _, c := range confirms {
		in.confirm(c.p, c.lines)
	}
}

// rounds splits msgs into rounds that hold at most one message of a
// subject: a job's n-th message is in the n-th round, so that its messages
// are published one round after the other, in the order of its records.
func rounds(msgs []*pending) [][]*pending {
	var out [][]*pending
	nth := map[string]int{}
	for _, m := range msgs {
		r := nth[m.subject]
		nth[m.subject] = r + 1
		if r == len(out) {
			out = append(out, nil)
		}
		out[r] = append(out[r], m)
	}
	return out
}
