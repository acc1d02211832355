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
// cluster's failover. The end of Ctx (the daemon's) ends the waiting.
type StreamPublisher struct {
	Ctx      context.Context
	JS       jetstream.JetStream
	Patience time.Duration
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
