package ingest

import (
	"bytes"
	"context"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// TestDecodedAreKeptBounded: a message's records are taken once; what
// nobody takes goes once it is older than decodedAge, or once keeping it
// would pass decodedMax records.
func TestDecodedAreKeptBounded(t *testing.T) {
	recs := func(n int) []telemetry.StepRecord { return make([]telemetry.StepRecord, n) }
	var d decoded
	t0 := time.Unix(1000, 0)
	d.put("a", recs(3), t0)
	d.put("b", recs(2), t0.Add(time.Second))
	if got, ok := d.take("a"); !ok || len(got) != 3 {
		t.Fatalf("take(a) = %d records, %v; want 3", len(got), ok)
	}
	if _, ok := d.take("a"); ok {
		t.Fatal("a message's records were taken twice")
	}
	d.put("c", recs(1), t0.Add(decodedAge+2*time.Second)) // b is past its age now
	if _, ok := d.take("b"); ok {
		t.Error("b was kept past decodedAge")
	}
	d.put("big", recs(decodedMax), t0.Add(decodedAge+3*time.Second)) // c must go to make room
	if _, ok := d.take("c"); ok {
		t.Error("c was kept past decodedMax records")
	}
	if d.n != decodedMax || len(d.byID) != 1 {
		t.Errorf("%d records in %d messages kept, want %d in 1", d.n, len(d.byID), decodedMax)
	}
	d.put("huge", recs(decodedMax+1), t0.Add(decodedAge+4*time.Second))
	if _, ok := d.take("huge"); ok {
		t.Error("a message of more than decodedMax records was kept")
	}
}

// TestStoredMessagesRecordsAreTheSockets: each step message the socket
// stores comes back on the job's stored subject with its id, under which
// the socket has its records, exactly as decoding the message gives them.
func TestStoredMessagesRecordsAreTheSockets(t *testing.T) {
	nc, _ := stepStore(t)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(PublishTimeout))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	key, err := LoadKey(filepath.Join(dir, "key"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	in, err := Listen(filepath.Join(dir, "s.sock"), &collector{msgs: map[string][][]byte{}},
		Options{Log: zap.NewNop(), Verify: key.Verify, Steps: StreamPublisher{Ctx: ctx, JS: js, Patience: time.Second}, Window: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	var mu sync.Mutex
	var msgs []*nats.Msg
	sub, err := nc.Subscribe(telemetry.StoredStepSubject("a-000001"), func(m *nats.Msg) {
		mu.Lock()
		msgs = append(msgs, m)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	w := dialConfirm(t, in, key, true)
	for i := 0; i < 5; i++ { // five messages at least: a window each
		w.write(stepLines(1+10*i, 10+10*i)...)
		if n := w.stored(int64(11+10*i), 30*time.Second); n != int64(11+10*i) {
			t.Fatalf("confirmed %d lines, want %d", n, 11+10*i)
		}
	}
	// The store republishes a message once it stored it, in its own time:
	// the confirmation can come first.
	lines := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, m := range msgs {
			n += bytes.Count(m.Data, []byte{'\n'})
		}
		return n
	}
	for deadline := time.Now().Add(10 * time.Second); lines() < 50 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, m := range msgs {
		id := m.Header.Get(jetstream.MsgIDHeader)
		if _, _, ok := history.StoredAt(m); !ok || id == "" {
			t.Fatalf("a stored message without its id or sequences: %v", m.Header)
		}
		got, ok := in.Decoded(id)
		want, bad := telemetry.DecodeBatch(m.Data)
		if !ok || bad != 0 || !reflect.DeepEqual(got, want) {
			t.Fatalf("message %s: the socket's records %v (%v), decoded %v (%d bad)", id, got, ok, want, bad)
		}
		total += len(got)
	}
	if len(msgs) < 2 || total != 50 {
		t.Errorf("%d records in %d messages, want 50 in several", total, len(msgs))
	}
	if in.decoded.n != 0 {
		t.Errorf("%d records kept after every message was taken", in.decoded.n)
	}
}
