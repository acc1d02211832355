package ingest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/internal/testnats"
)

// publishAsync runs p.Publish in a goroutine; the channel has its result.
func publishAsync(p StreamPublisher, subject string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- p.Publish(subject, []byte("x")) }()
	return done
}

// result waits for a publish's result; a publish still trying after 20
// seconds fails the test.
func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("publish still trying after 20s")
		return nil
	}
}

// TestStreamPublisherTriesAgain: a publish no stream acknowledges yet is
// tried again until the stream takes it (its leader back), within Patience.
func TestStreamPublisherTriesAgain(t *testing.T) {
	_, js := testnats.JetStream(t)
	p := StreamPublisher{Ctx: t.Context(), JS: js, Patience: time.Minute}
	done := publishAsync(p, "late.x")
	time.Sleep(200 * time.Millisecond) // a few tries fail first
	s, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := result(t, done); err != nil {
		t.Fatalf("publish once the stream exists: %v", err)
	}
	if info, err := s.Info(t.Context()); err != nil || info.State.Msgs != 1 {
		t.Fatalf("stream holds %+v (%v), want the one message", info, err)
	}
}

// TestStreamPublisherGivesUp: past Patience (or at once without one) the
// publish fails, naming the subject and wrapping the last error; a store
// that cannot write returns ErrStoreFull at once; the daemon's end ends the
// waiting.
func TestStreamPublisherGivesUp(t *testing.T) {
	_, js := testnats.JetStream(t)
	for _, tc := range []struct {
		name     string
		patience time.Duration
		hold     bool
		cancel   bool
		want     string
		is       error // wrapped (the last publish's error is not known when it stops)
	}{
		{name: "past patience", patience: 300 * time.Millisecond, want: "publish to none.x, unacknowledged for 300ms", is: jetstream.ErrNoStreamResponse},
		{name: "no patience", want: "publish to none.x, unacknowledged for 0s", is: jetstream.ErrNoStreamResponse},
		{name: "store full", patience: time.Hour, hold: true, want: "publish to none.x: the store cannot write", is: ErrStoreFull},
		{name: "daemon stops", patience: time.Hour, cancel: true, want: "publish to none.x: stopping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			p := StreamPublisher{Ctx: ctx, JS: js, Patience: tc.patience, Hold: func() bool { return tc.hold }}
			done := publishAsync(p, "none.x")
			if tc.cancel {
				time.Sleep(100 * time.Millisecond)
				cancel()
			}
			err := result(t, done)
			if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("publish: %v; want %q wrapping %v", err, tc.want, tc.is)
			}
		})
	}
}
