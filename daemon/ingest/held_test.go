package ingest

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

// kept is the step lines a test store took, in order.
type kept struct {
	mu    sync.Mutex
	steps []string
}

// keep takes a message's lines (s.mu held).
func (s *kept) keep(data []byte) {
	s.steps = append(s.steps, strings.Split(strings.TrimSpace(string(data)), "\n")...)
}

func (s *kept) taken() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.steps)
}

// fullStore is a Publisher whose store refuses every batch (ErrStoreFull)
// while full is set, and says so (Holding); it keeps what it takes.
type fullStore struct {
	kept
	full  atomic.Bool
	tries atomic.Int64
}

func (s *fullStore) Publish(_ string, data []byte) error {
	s.tries.Add(1)
	if s.full.Load() {
		return ErrStoreFull
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keep(data)
	return nil
}

func (s *fullStore) Holding() bool { return s.full.Load() }

// serveSteps has a server whose steps go to store read, on p, a hello of
// job a-000001's attempt 1 and then steps 1 to n (stepLines); its held
// batches' publisher runs until the test ends.
func serveSteps(t *testing.T, store Publisher, n int, p *peer) *Server {
	t.Helper()
	key, err := LoadKey(filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	in := newServer(&collector{msgs: map[string][][]byte{}}, zap.NewNop())
	in.verify, in.steps = key.Verify, store
	go in.publishHeld()
	t.Cleanup(in.stopHeld)
	var lines bytes.Buffer
	fmt.Fprintf(&lines, `{"v":1,"kind":"hello","job":"a-000001","attempt":1,"rank":0,"world":1,"step":0,"t":1,"token":%q}`+"\n", key.Token("a-000001", 1))
	for _, l := range stepLines(1, n) {
		lines.WriteString(l + "\n")
	}
	in.serve(&lines, p)
	return in
}

// TestStepsWaitForAFullStore: while the store cannot write, step batches are
// held (not dropped, the connection still read) and, once it writes again,
// stored in the order they came.
func TestStepsWaitForAFullStore(t *testing.T) {
	store := &fullStore{}
	store.full.Store(true)
	const n = 500
	in := serveSteps(t, store, n, &peer{}) // returns: the reader does not wait for the store
	if got := store.taken(); got != 0 {
		t.Fatalf("the full store took %d records", got)
	}
	if !in.held.pending() {
		t.Fatal("nothing held while the store is full")
	}
	store.full.Store(false)
	for deadline := time.Now().Add(time.Minute); store.taken() < n && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	s := in.Stats()
	if store.taken() != n || s.Accepted != n || len(s.Dropped) != 0 {
		t.Fatalf("stored %d, accepted %d, dropped %v; want %d, %d, none", store.taken(), s.Accepted, s.Dropped, n, n)
	}
	for i, l := range store.steps {
		if want := fmt.Sprintf(`"step":%d,`, i+1); !strings.Contains(l, want) {
			t.Fatalf("record %d is %s; want step %d (in order)", i, l, i+1)
		}
	}
}

// silentStore is a store whose acknowledgements are lost: it stores each
// message, once per id as JetStream does, but the first publish of every id
// gets no answer (ErrUnacknowledged).
type silentStore struct {
	kept
	seen map[string]bool
}

func (s *silentStore) Publish(subject string, data []byte) error {
	return s.PublishID(subject, data, "")
}

func (s *silentStore) PublishID(_ string, data []byte, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[id] {
		return nil // a duplicate: stored once
	}
	s.seen[id] = true
	s.keep(data)
	return fmt.Errorf("publish %s: %w", id, ErrUnacknowledged)
}

// TestUnacknowledgedStepsAreStoredOnce: a batch whose publish was never
// answered is held and sent again with its id, not dropped with its
// connection failed (its worker then sent the records again in a new
// message, and the store kept both when it had taken the first).
func TestUnacknowledgedStepsAreStoredOnce(t *testing.T) {
	store := &silentStore{seen: map[string]bool{}}
	const n = 500
	p := &peer{}
	in := serveSteps(t, store, n, p)
	for deadline := time.Now().Add(time.Minute); in.Stats().Accepted < n && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	s := in.Stats()
	if store.taken() != n || s.Accepted != n || len(s.Dropped) != 0 || p.failed.Load() {
		t.Fatalf("stored %d, accepted %d, dropped %v, connection failed %v; want %d, %d, none, no", store.taken(), s.Accepted, s.Dropped, p.failed.Load(), n, n)
	}
}

// roundStore is an EachPublisher that takes a round's messages except the
// ones whose subject it is told to fail in a round, which it then takes
// one by one (PublishID); it counts what it stored by id.
type roundStore struct {
	mu     sync.Mutex
	failIn map[string]bool
	rounds int
	byID   map[string]int
	order  []string // subjects, in the order stored
}

func (s *roundStore) Publish(subject string, data []byte) error {
	return s.PublishID(subject, data, "")
}

func (s *roundStore) PublishID(subject string, _ []byte, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byID[id]++
	s.order = append(s.order, subject)
	return nil
}

func (s *roundStore) PublishEach(msgs []Message) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rounds++
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if s.failIn[m.Subject] {
			errs[i] = fmt.Errorf("publish to %s: no answer", m.Subject)
			continue
		}
		s.byID[m.ID]++
		s.order = append(s.order, m.Subject)
	}
	return errs
}

// TestFlushRoundTriesWhatFailedAlone: the messages of a round that the
// store did not take together go the one-by-one way, with their ids; every
// message is stored once and counted, and a lone message is sent alone.
func TestFlushRoundTriesWhatFailedAlone(t *testing.T) {
	store := &roundStore{failIn: map[string]bool{"b": true}, byID: map[string]int{}}
	in := newServer(&collector{msgs: map[string][][]byte{}}, zap.NewNop())
	in.steps = store
	round := []*pending{{subject: "a", id: "1", n: 2}, {subject: "b", id: "2", n: 3}, {subject: "c", id: "3", n: 4}}
	for i, err := range in.flushRound(round) {
		if err != nil {
			t.Errorf("message %d: %v", i, err)
		}
	}
	if store.rounds != 1 || store.byID["1"] != 1 || store.byID["2"] != 1 || store.byID["3"] != 1 || in.accepted.Load() != 9 {
		t.Fatalf("%d rounds, stored %v, accepted %d; want 1 round, each once, 9 records", store.rounds, store.byID, in.accepted.Load())
	}
	if got := strings.Join(store.order, ""); got != "acb" {
		t.Errorf("stored in the order %q, want a and c in the round, then b alone", got)
	}
	in.flushRound([]*pending{{subject: "d", id: "4", n: 1}})
	if store.rounds != 1 || store.byID["4"] != 1 {
		t.Errorf("a lone message: %d rounds, stored %v; want it sent alone", store.rounds, store.byID)
	}
}
