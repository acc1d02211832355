package ingest

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/internal/testnats"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
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
// publish fails, naming the subject and wrapping the last error (a store
// that never answered: ErrUnacknowledged, so that the batch is held); a store
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
		{name: "past patience", patience: 300 * time.Millisecond, want: "publish to none.x: the store did not acknowledge it for 300ms: nats: no response from stream", is: ErrUnacknowledged},
		{name: "no patience", want: "publish to none.x: the store did not acknowledge it for 0s: nats: no response from stream", is: ErrUnacknowledged},
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

// TestStreamStoresAMessageSentAgainOnce: a message tried again (its
// acknowledgement lost in a stall) is stored once, by its id, within the
// step stream's duplicate window, which outlasts the longest a daemon tries
// one message (issue 21).
func TestStreamStoresAMessageSentAgainOnce(t *testing.T) {
	if worst := DefaultPatience + PublishTimeout + time.Second; worst >= history.StepDuplicates {
		t.Fatalf("a message may be tried for %s, past the duplicate window of %s", worst, history.StepDuplicates)
	}
	_, st := stepStore(t)
	p := StreamPublisher{Ctx: t.Context(), JS: st.JS, Patience: time.Second}
	for range 3 {
		if err := p.PublishID(telemetry.StepSubject("a-000001"), []byte(stepLines(1, 1)[0]+"\n"), "node-1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := storedSteps(t, st); n != 1 {
		t.Fatalf("the stream holds %d messages, want the message once", n)
	}
}

// stepStore opens the daemon's streams on a test server.
func stepStore(t *testing.T) (*nats.Conn, *history.Store) {
	t.Helper()
	nc, js := testnats.JetStream(t)
	st, err := history.OpenStore(t.Context(), js, history.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	return nc, st
}

// storedSteps is how many messages the step stream of st holds.
func storedSteps(t *testing.T, st *history.Store) uint64 {
	t.Helper()
	s, err := st.JS.Stream(t.Context(), telemetry.StepStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestPublishEach: a round goes out together and says, message by message,
// what the store took. A message sent again with its id is stored once; a
// subject no stream takes fails alone.
func TestPublishEach(t *testing.T) {
	nc, st := stepStore(t)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(PublishTimeout))
	if err != nil {
		t.Fatal(err)
	}
	p := StreamPublisher{Ctx: t.Context(), JS: js, Patience: time.Second}
	line := []byte(stepLines(1, 1)[0] + "\n")
	msgs := []Message{
		{Subject: telemetry.StepSubject("a-000001"), ID: "n-1", Data: line},
		{Subject: "nowhere.x", ID: "n-2", Data: line},
		{Subject: telemetry.StepSubject("b-000002"), ID: "n-3", Data: line},
		{Subject: telemetry.StepSubject("c-000003"), ID: "n-1", Data: line}, // n-1 again: a duplicate
	}
	errs := p.PublishEach(msgs)
	if len(errs) != len(msgs) || errs[0] != nil || errs[2] != nil || errs[3] != nil {
		t.Fatalf("errors %v: want only the second to fail", errs)
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "nowhere.x") {
		t.Fatalf("a subject no stream takes: %v, want an error that names it", errs[1])
	}
	if n := storedSteps(t, st); n != 2 {
		t.Fatalf("the stream holds %d messages, want 2 (n-1 once, n-3)", n)
	}
}

// TestRounds: a round holds at most one message of a subject, and a
// subject's messages come in their order, one round after the other.
func TestRounds(t *testing.T) {
	m := func(subject string, n int) *pending { return &pending{subject: subject, n: n} }
	a1, a2, a3, b1, c1, c2 := m("a", 1), m("a", 2), m("a", 3), m("b", 1), m("c", 1), m("c", 2)
	for _, tc := range []struct {
		in   []*pending
		want [][]*pending
	}{
		{nil, nil},
		{[]*pending{a1}, [][]*pending{{a1}}},
		{[]*pending{a1, b1, c1}, [][]*pending{{a1, b1, c1}}},
		{[]*pending{a1, a2, b1, c1, a3, c2}, [][]*pending{{a1, b1, c1}, {a2, c2}, {a3}}},
	} {
		if got := rounds(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("rounds(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
