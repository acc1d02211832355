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

// fullStore is a Publisher whose store refuses every batch (ErrStoreFull)
// while full is set, and says so (Holding); it keeps what it takes.
type fullStore struct {
	full  atomic.Bool
	tries atomic.Int64
	mu    sync.Mutex
	steps []string
}

func (s *fullStore) Publish(_ string, data []byte) error {
	s.tries.Add(1)
	if s.full.Load() {
		return ErrStoreFull
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, strings.Split(strings.TrimSpace(string(data)), "\n")...)
	return nil
}

func (s *fullStore) Holding() bool { return s.full.Load() }

func (s *fullStore) taken() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.steps)
}

// TestStepsWaitForAFullStore: while the store cannot write, step batches are
// held (not dropped, the connection still read) and, once it writes again,
// stored in the order they came.
func TestStepsWaitForAFullStore(t *testing.T) {
	key, err := LoadKey(filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	store := &fullStore{}
	store.full.Store(true)
	in := newServer(&collector{msgs: map[string][][]byte{}}, zap.NewNop())
	in.verify, in.steps = key.Verify, store
	go in.publishHeld() // joined by stopHeld
	defer in.stopHeld()
	var lines bytes.Buffer
	fmt.Fprintf(&lines, `{"v":1,"kind":"hello","job":"a-000001","attempt":1,"rank":0,"world":1,"step":0,"t":1,"token":%q}`+"\n", key.Token("a-000001", 1))
	const n = 500
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&lines, `{"v":1,"job":"a-000001","attempt":1,"rank":0,"world":1,"step":%d,"t":1,"dt":0.1,"samples":8}`+"\n", i)
	}
	in.serve(&lines, &peer{}) // returns: the reader does not wait for the store
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
	mu    sync.Mutex
	seen  map[string]bool
	steps []string
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
	s.steps = append(s.steps, strings.Split(strings.TrimSpace(string(data)), "\n")...)
	return fmt.Errorf("publish %s: %w", id, ErrUnacknowledged)
}

func (s *silentStore) taken() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.steps)
}

// TestUnacknowledgedStepsAreStoredOnce: a batch whose publish was never
// answered is held and sent again with its id, not dropped with its
// connection failed (its worker then sent the records again in a new
// message, and the store kept both when it had taken the first).
func TestUnacknowledgedStepsAreStoredOnce(t *testing.T) {
	key, err := LoadKey(filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	store := &silentStore{seen: map[string]bool{}}
	in := newServer(&collector{msgs: map[string][][]byte{}}, zap.NewNop())
	in.verify, in.steps = key.Verify, store
	go in.publishHeld() // joined by stopHeld
	defer in.stopHeld()
	var lines bytes.Buffer
	fmt.Fprintf(&lines, `{"v":1,"kind":"hello","job":"a-000001","attempt":1,"rank":0,"world":1,"step":0,"t":1,"token":%q}`+"\n", key.Token("a-000001", 1))
	const n = 500
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&lines, `{"v":1,"job":"a-000001","attempt":1,"rank":0,"world":1,"step":%d,"t":1,"dt":0.1,"samples":8}`+"\n", i)
	}
	p := &peer{}
	in.serve(&lines, p)
	for deadline := time.Now().Add(time.Minute); in.Stats().Accepted < n && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	s := in.Stats()
	if store.taken() != n || s.Accepted != n || len(s.Dropped) != 0 || p.failed.Load() {
		t.Fatalf("stored %d, accepted %d, dropped %v, connection failed %v; want %d, %d, none, no", store.taken(), s.Accepted, s.Dropped, p.failed.Load(), n, n)
	}
}
