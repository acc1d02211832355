package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
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
	return p.PublishID(subject, data, "")
}

// DefaultPatience is how long the daemon tries a step message before it
// gives up on it (a cluster electing a new stream leader takes seconds).
const DefaultPatience = 30 * time.Second

// PublishTimeout bounds each try of a publish: with Patience, the longest
// a message may be sent again, which the stream's duplicate window
// (history.StepDuplicates) must outlast.
const PublishTimeout = 5 * time.Second

// PublishID implements IDPublisher: each try carries id (when set), so that
// a message the stream took although its acknowledgement was lost (a
// stalled daemon, a leader that changed) is stored once.
func (p StreamPublisher) PublishID(subject string, data []byte, id string) error {
	var opts []jetstream.PublishOpt
	if id != "" {
		opts = append(opts, jetstream.WithMsgID(id))
	}
	var last error // the last publish's error, for when the daemon stops
	try := func() (struct{}, error) {
		ctx, cancel := context.WithTimeout(p.Ctx, PublishTimeout)
		_, err := p.JS.Publish(ctx, subject, data, opts...)
		cancel()
		if err != nil && p.Holding() {
			return struct{}{}, backoff.Permanent(fmt.Errorf("publish to %s: %w (%v)", subject, ErrStoreFull, err))
		}
		last = err
		return struct{}{}, err
	}
	patience := backoff.WithMaxElapsedTime(p.Patience)
	if p.Patience <= 0 {
		patience = backoff.WithMaxTries(1) // no elapsed time is no limit to backoff
	}
	_, err := backoff.Retry(p.Ctx, try, retryBackOff(), patience)
	switch {
	case err == nil, errors.Is(err, ErrStoreFull):
		return err
	case p.Ctx.Err() != nil:
		return fmt.Errorf("publish to %s: stopping: %w", subject, last)
	}
	if unanswered(last) {
		return fmt.Errorf("publish to %s: %w for %s: %w", subject, ErrUnacknowledged, p.Patience, err)
	}
	return fmt.Errorf("publish to %s, unacknowledged for %s: %w", subject, p.Patience, err)
}

// PublishEach implements EachPublisher: the messages go out together, each
// once, with its id, and are waited for together, PublishTimeout at most
// (p.JS must be made with jetstream.WithPublishAsyncTimeout, so that a
// message the store never answers does not stay pending in it).
func (p StreamPublisher) PublishEach(msgs []Message) []error {
	errs := make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		var opts []jetstream.PublishOpt
		if m.ID != "" {
			opts = append(opts, jetstream.WithMsgID(m.ID))
		}
		futures[i], errs[i] = p.JS.PublishMsgAsync(&nats.Msg{Subject: m.Subject, Data: m.Data}, opts...)
	}
	ctx, cancel := context.WithTimeout(p.Ctx, PublishTimeout)
	defer cancel()
	for i, f := range futures {
		if f == nil {
			continue
		}
		if err := awaitAck(ctx, f); err != nil {
			errs[i] = fmt.Errorf("publish to %s: %w", msgs[i].Subject, err)
		}
	}
	return errs
}

// awaitAck waits for f's answer until ctx ends; an answer that came by
// then counts, whichever select saw first.
func awaitAck(ctx context.Context, f jetstream.PubAckFuture) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-ctx.Done():
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		default:
			return ctx.Err()
		}
	}
}

// ErrUnacknowledged is a publish the store never answered within the
// publisher's patience: the message may have been stored or not. The
// server holds the batch and sends it again with its id, which the store
// stores once (within its duplicate window): failing the connection
// instead made its worker send the records again in a new message, and
// those the store had taken were stored twice.
var ErrUnacknowledged = errors.New("the store did not acknowledge it")

// unanswered says whether a publish's error is the store's silence (the
// outcome unknown), not a refusal.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// retryBackOff is how long a publish the store did not take waits before
// the next try: 50 ms, twice as long after each failure, up to a second.
func retryBackOff() backoff.RetryOption {
	return backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: 50 * time.Millisecond, Multiplier: 2, MaxInterval: time.Second})
}

// Holding says whether Hold says the store cannot write: the server then
// holds step batches without trying the store first.
func (p StreamPublisher) Holding() bool { return p.Hold != nil && p.Hold() }
