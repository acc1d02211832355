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
