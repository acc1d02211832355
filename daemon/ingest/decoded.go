package ingest

import (
	"sync"
	"time"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// Every step record is decoded where it comes in (the socket checks it),
// and the job's runner decoded it again from the stored message: a decode
// in place, after a wake-up, costs microseconds, and the second one was a
// fifteenth of the daemon's CPU per record (issue 25). The socket keeps the
// records of each message it publishes under the message's id, which the
// stored message carries, and the runner takes them instead of decoding
// (Server.Decoded). What nobody takes (a message held while the store was
// full, one a runner missed) ages out, and the records kept are bounded,
// so that a burst of blocks leaves no more than decodedMax of them (2.4 MB:
// more than a node's per-step writers have on their way at once; a block
// writer's records past it are decoded by the runner).
const (
	decodedMax = 1 << 13
	decodedAge = 10 * time.Second
)

// decoded is the records of the messages published lately, by id.
type decoded struct {
	mu    sync.Mutex
	byID  map[string][]telemetry.StepRecord
	order []decodedEntry // oldest first; some taken already
	n     int            // records in byID
}

// decodedEntry is one message put, for its eviction.
type decodedEntry struct {
	id string
	at time.Time
}

// put keeps the records of message id, published at now.
func (d *decoded) put(id string, recs []telemetry.StepRecord, now time.Time) {
	if id == "" || len(recs) == 0 || len(recs) > decodedMax {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.order) > 0 && (d.n+len(recs) > decodedMax || now.Sub(d.order[0].at) > decodedAge) {
		d.drop(d.order[0].id)
		d.order = d.order[1:]
	}
	if d.byID == nil {
		d.byID = map[string][]telemetry.StepRecord{}
	}
	d.drop(id)
	d.byID[id] = recs
	d.n += len(recs)
	d.order = append(d.order, decodedEntry{id: id, at: now})
}

// take returns and forgets the records of message id.
func (d *decoded) take(id string) ([]telemetry.StepRecord, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	recs, ok := d.byID[id]
	d.drop(id)
	return recs, ok
}

// drop forgets message id's records (d.mu held).
func (d *decoded) drop(id string) {
	if recs, ok := d.byID[id]; ok {
		delete(d.byID, id)
		d.n -= len(recs)
	}
}

// Decoded returns the records of the step message the socket published
// with id (its Nats-Msg-Id), as telemetry.DecodeBatch would decode the
// message, if it still has them; a message is taken once.
func (in *Server) Decoded(id string) ([]telemetry.StepRecord, bool) { return in.decoded.take(id) }
