package history

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/internal/testnats"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// TestReplayLast replays the newest node sample per subject from a real
// embedded JetStream, then follows new ones.
func TestReplayLast(t *testing.T) {
	_, js := testnats.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := OpenStore(ctx, js, Retention{}); err != nil {
		t.Fatal(err)
	}
	subjects := []string{telemetry.AllNodeGPU, telemetry.AllNodeHost}
	n := 0
	if err := ReplayLast(ctx, js, telemetry.NodeStream, subjects, false, func(jetstream.Msg) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("empty stream: %d messages, %v", n, err)
	}
	for _, p := range []struct{ subj, data string }{
		{telemetry.NodeSubject("a", telemetry.NodeGPU), "a-gpu-1"}, {telemetry.NodeSubject("a", telemetry.NodeHost), "a-host-1"},
		{telemetry.NodeSubject("a", telemetry.NodeGPU), "a-gpu-2"}, {telemetry.NodeSubject("b", telemetry.NodeHost), "b-host-1"},
		{telemetry.NodeSubject("a", telemetry.NodeHost), "a-host-2"}, {telemetry.NodeSubject("a", telemetry.NodeGPU), "a-gpu-3"},
	} {
		if _, err := js.Publish(ctx, p.subj, []byte(p.data)); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	if err := ReplayLast(ctx, js, telemetry.NodeStream, subjects, false, func(m jetstream.Msg) error { got[string(m.Data())] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !got["a-gpu-3"] || !got["a-host-2"] || !got["b-host-1"] {
		t.Errorf("replayed %v: want the newest of each subject", got)
	}
	// Since a time: every message since, oldest first; none since now.
	var since []string
	if err := ReplaySince(ctx, js, telemetry.NodeStream, []string{telemetry.AllNodeHost}, time.Now().Add(-time.Minute), func(m jetstream.Msg) error {
		since = append(since, string(m.Data()))
		return nil
	}); err != nil || len(since) != 3 || since[0] != "a-host-1" || since[2] != "a-host-2" {
		t.Errorf("since a minute ago: %v, %v: want the 3 host samples in order", since, err)
	}
	n = 0
	if err := ReplaySince(ctx, js, telemetry.NodeStream, subjects, time.Now().Add(time.Minute), func(jetstream.Msg) error { n++; return nil }); err != nil || n != 0 {
		t.Errorf("since a minute ahead: %d messages, %v", n, err)
	}
	// Following: the newest, then what comes next.
	var seen []string
	errDone := errors.New("done")
	fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
	defer fcancel()
	err := ReplayLast(fctx, js, telemetry.NodeStream, subjects, true, func(m jetstream.Msg) error {
		seen = append(seen, string(m.Data()))
		if len(seen) == 3 {
			if _, err := js.Publish(ctx, telemetry.NodeSubject("b", telemetry.NodeGPU), []byte("b-gpu-1")); err != nil {
				return err
			}
		}
		if len(seen) == 4 {
			return errDone
		}
		return nil
	})
	if !errors.Is(err, errDone) || len(seen) != 4 || seen[3] != "b-gpu-1" {
		t.Errorf("follow: %v, %v: want the 3 newest, then b-gpu-1", seen, err)
	}
}

// twoHostSamples is a store with two host samples of node a, and a
// context that ends with the test (or after a minute).
func twoHostSamples(t *testing.T) (context.Context, jetstream.JetStream) {
	t.Helper()
	_, js := testnats.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if _, err := OpenStore(ctx, js, Retention{}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a", "b"} {
		if _, err := js.Publish(ctx, telemetry.NodeSubject("a", telemetry.NodeHost), []byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, js
}

// TestReplayLeavesNoConsumer reads a stream more times than the server
// takes consumers on it (1000 by default), in every way a read ends: each
// read deletes its consumer as it returns, so none is refused and none is
// left.
func TestReplayLeavesNoConsumer(t *testing.T) {
	ctx, js := twoHostSamples(t)
	subjects := []string{telemetry.AllNodeHost}
	errFirst := errors.New("first")
	reads := []struct {
		name string
		read func() error
	}{
		{"to the end", func() error {
			return Replay(ctx, js, telemetry.NodeStream, subjects, false, func(jetstream.Msg) error { return nil })
		}},
		{"the newest", func() error {
			return ReplayLast(ctx, js, telemetry.NodeStream, subjects, false, func(jetstream.Msg) error { return nil })
		}},
		{"nothing after the last", func() error {
			return ReplayAfter(ctx, js, telemetry.NodeStream, subjects, 1<<40, false, func(jetstream.Msg) error { return nil })
		}},
		{"a follow ended by its reader", func() error {
			if err := Replay(ctx, js, telemetry.NodeStream, subjects, true, func(jetstream.Msg) error { return errFirst }); !errors.Is(err, errFirst) {
				return err
			}
			return nil
		}},
	}
	for i := range 1400 {
		r := reads[i%len(reads)]
		if err := r.read(); err != nil {
			t.Fatalf("read %d (%s): %v", i, r.name, err)
		}
	}
	s, err := js.Stream(ctx, telemetry.NodeStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Consumers; n != 0 {
		t.Errorf("%d consumers left on %s after the reads, want 0", n, telemetry.NodeStream)
	}
}

// TestShortReplayAllocatesLittle: a replay of two messages allocates far
// less than its byte bound. A byte bound alone made nats.go allocate a
// buffer for a million messages (8 MiB) for every replay, and the step
// digest replays each job's new records every few seconds (issue 25).
func TestShortReplayAllocatesLittle(t *testing.T) {
	ctx, js := twoHostSamples(t)
	const reads = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range reads {
		n := 0
		if err := Replay(ctx, js, telemetry.NodeStream, []string{telemetry.AllNodeHost}, false, func(jetstream.Msg) error { n++; return nil }); err != nil || n != 2 {
			t.Fatalf("replayed %d messages, %v: want 2", n, err)
		}
	}
	runtime.ReadMemStats(&after)
	// The process's allocations: the embedded server's count too, so the
	// bound is loose; the million-message buffer alone was 8 MiB a read.
	if per := (after.TotalAlloc - before.TotalAlloc) / reads; per > 1<<20 {
		t.Errorf("a replay of 2 messages allocated %d KiB, want under 1 MiB", per>>10)
	}
}
