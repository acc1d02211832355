package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamPublisher publishes into a JetStream stream and waits for the
// stream's acknowledgement; a publish that is not acknowledged (no stream
// leader for a moment, a server restarting) is tried again, with back-off,
// for up to Patience, so that a record the socket took is not lost to a
// cluster's failover. A publish that fails while Hold says so (the store
// cannot write: a full state disk) returns ErrStoreFull at once: the server
// holds the batch and publishes it once the store writes again. The end of
// Ctx (the daemon's) ends the waiting.
type StreamPublisher struct {
	Ctx      context.Context
	JS       jetstream.JetStream
	Patience time.Duration
	Hold     func() bool
}

// Publish implements Publisher.
func (p StreamPublisher) Publish(subject string, data []byte) error {
	deadline := time.Now().Add(p.Patience)
	wait := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(p.Ctx, 5*time.Second)
		_, err := p.JS.Publish(ctx, subject, data)
		cancel()
		if err == nil {
			return nil
		}
		if p.Holding() {
			return fmt.Errorf("publish to %s: %w (%v)", subject, ErrStoreFull, err)
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("publish to %s, unacknowledged for %s: %w", subject, p.Patience, err)
		}
		select {
		case <-p.Ctx.Done():
			return fmt.Errorf("publish to %s: stopping: %w", subject, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// Holding says whether Hold says the store cannot write: the server then
// holds step batches without trying the store first.
func (p StreamPublisher) Holding() bool { return p.Hold != nil && p.Hold() }
