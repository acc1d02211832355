package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// Replay delivers the messages of stream on subjects to fn, oldest first.
// Without follow it returns once the messages that existed when it started
// have been delivered; with follow it goes on until ctx is done or fn fails.
// A subject with no messages is not an error.
func Replay(ctx context.Context, js jetstream.JetStream, stream string, subjects []string, follow bool, fn func(jetstream.Msg) error) error {
	return ReplayAfter(ctx, js, stream, subjects, 0, follow, fn)
}

// ReplayAfter is Replay from after the stream sequence after (0: from the
// start), so that a follower that lost its connection goes on where it was.
func ReplayAfter(ctx context.Context, js jetstream.JetStream, stream string, subjects []string, after uint64, follow bool, fn func(jetstream.Msg) error) error {
	s, err := openStream(ctx, js, stream)
	if err != nil {
		return fmt.Errorf("open stream %s: %w", stream, err)
	}
	var last uint64
	for _, subj := range subjects {
		m, err := lastMsg(ctx, s, subj)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return fmt.Errorf("read last message of %s: %w", subj, err)
		case m.Sequence > last:
			last = m.Sequence
		}
	}
	if last <= after && !follow {
		return nil
	}
	var done func(*jetstream.MsgMetadata) bool
	if !follow {
		done = func(md *jetstream.MsgMetadata) bool { return md.Sequence.Stream >= last }
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverAllPolicy}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	return consume(ctx, s, cfg, stream, done, fn)
}

// consume delivers the messages of an ordered consumer of s to fn until fn
// fails, ctx ends, or done (nil: never) says a message was the last wanted.
// what names the stream in errors.
func consume(ctx context.Context, s jetstream.Stream, cfg jetstream.OrderedConsumerConfig, what string,
	done func(*jetstream.MsgMetadata) bool, fn func(jetstream.Msg) error) error {
	c, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("consume %s: %w", what, err)
	}
	// Run after the iterator's Stop: the consumer is gone when this returns.
	defer deleteConsumer(ctx, s, c)
	if info := c.CachedInfo(); done != nil && info != nil && info.NumPending == 0 {
		return nil // nothing to deliver, and no following
	}
	it, err := c.Messages(jetstream.PullMaxMessagesWithBytesLimit(replayBufferMessages, replayBufferBytes))
	if err != nil {
		return fmt.Errorf("consume %s: %w", what, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("consume %s: %w", what, err)
		}
		if err := fn(m); err != nil {
			return err
		}
		if done != nil {
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("read metadata from %s: %w", what, err)
			}
			if done(md) {
				return nil
			}
		}
	}
}

// A replay asks the server for at most replayBufferMessages messages and
// replayBufferBytes at a time. nats.go's default, 500 messages and no
// byte bound, took up to 128 MiB of step batches (256 KiB each) at once
// for a read of a long history, and for the step digest catching up with
// a job that writes blocks, which the collector then had to sweep while
// the ingest waited. A byte bound alone (PullMaxBytes) makes nats.go
// allocate a buffer for a million messages, 8 MiB zeroed for every
// replay, however short: the digest's catch-up of 8 per-step jobs spent
// more on that than on their records (issue 25). The byte bound must be
// at least the largest message (the daemon's max_payload, 4 MiB).
const (
	replayBufferMessages = 500
	replayBufferBytes    = 8 << 20
)

// deleteConsumer deletes the ordered consumer c of s from the server. The
// server keeps an ordered consumer until it has been inactive for 5
// minutes (nats.go's default), and takes at most 1000 consumers per stream
// (its default): without this, every read of a stream left one behind,
// and after 1000 reads in 5 minutes (8 users reading logs in a loop reach
// that in seconds) every read and follow of the stream was refused
// ("maximum consumers limit reached") until they expired. A consumer that
// cannot be deleted (the server is gone) expires as before.
func deleteConsumer(ctx context.Context, s jetstream.Stream, c jetstream.Consumer) {
	info := c.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), openTimeout)
	defer cancel()
	_ = s.DeleteConsumer(ctx, info.Name)
}

// Drain waits (a second at most) until sub has handled every message the
// server had sent it when Drain was called.
func Drain(nc *nats.Conn, sub *nats.Subscription) {
	if err := nc.FlushTimeout(time.Second); err != nil {
		return
	}
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if n, _, err := sub.Pending(); err != nil || n == 0 {
			return
		}
	}
}

// ReplayLast delivers the newest message of each subject of stream matching
// subjects (which may hold wildcards: the newest per matching subject), then,
// with follow, every new message until ctx is done or fn fails. Without
// follow it returns once the newest messages have been delivered. A stream
// with no matching message is not an error.
func ReplayLast(ctx context.Context, js jetstream.JetStream, stream string, subjects []string, follow bool, fn func(jetstream.Msg) error) error {
	s, err := openStream(ctx, js, stream)
	if err != nil {
		return fmt.Errorf("open stream %s: %w", stream, err)
	}
	found := false
	for _, subj := range subjects {
		_, err := lastMsg(ctx, s, subj)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return fmt.Errorf("read last message of %s: %w", subj, err)
		default:
			found = true
		}
	}
	if !found && !follow {
		return nil
	}
	var done func(*jetstream.MsgMetadata) bool
	if !follow {
		done = lastPending
	}
	return consume(ctx, s, jetstream.OrderedConsumerConfig{FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy}, "newest of "+stream, done, fn)
}

// lastPending reports a message after which the consumer had nothing pending.
func lastPending(md *jetstream.MsgMetadata) bool { return md.NumPending == 0 }

// ReplaySince delivers the messages of stream on subjects taken since from
// (by the time the stream stored them), oldest first, and returns once the
// messages that existed when it started have been delivered.
func ReplaySince(ctx context.Context, js jetstream.JetStream, stream string, subjects []string, from time.Time, fn func(jetstream.Msg) error) error {
	return since(ctx, js, stream, subjects, from, lastPending, fn)
}

// FollowSince is ReplaySince that goes on with every new message until ctx
// is done or fn fails.
func FollowSince(ctx context.Context, js jetstream.JetStream, stream string, subjects []string, from time.Time, fn func(jetstream.Msg) error) error {
	return since(ctx, js, stream, subjects, from, nil, fn)
}

// since delivers the messages of stream on subjects since from until done
// says the last wanted came (nil: never).
func since(ctx context.Context, js jetstream.JetStream, stream string, subjects []string, from time.Time, done func(*jetstream.MsgMetadata) bool, fn func(jetstream.Msg) error) error {
	s, err := openStream(ctx, js, stream)
	if err != nil {
		return fmt.Errorf("open stream %s: %w", stream, err)
	}
	return consume(ctx, s, jetstream.OrderedConsumerConfig{FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from},
		fmt.Sprintf("%s since %s", stream, from.Format(time.RFC3339)), done, fn)
}

// openTimeout bounds opening a stream and reading its last messages: in a
// cluster that lost a server, a stream may need seconds to elect a leader.
const openTimeout = 30 * time.Second

// openStream opens stream, waiting for it at most openTimeout.
func openStream(ctx context.Context, js jetstream.JetStream, stream string) (jetstream.Stream, error) {
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	return js.Stream(ctx, stream)
}

// LastStepMsg returns the newest step message of job (a batch of its
// records), or nil when it has none.
func LastStepMsg(ctx context.Context, js jetstream.JetStream, job string) (*jetstream.RawStreamMsg, error) {
	s, err := openStream(ctx, js, telemetry.StepStream)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", telemetry.StepStream, err)
	}
	m, err := lastMsg(ctx, s, telemetry.StepSubject(job))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the last step of %s: %w", job, err)
	}
	return m, nil
}

// lastMsg reads the last message of subj in s, waiting at most openTimeout.
func lastMsg(ctx context.Context, s jetstream.Stream, subj string) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	return s.GetLastMsgForSubject(ctx, subj)
}
