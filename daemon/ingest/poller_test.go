package ingest

import "testing"

// TestSnapshotKeepsNoEndedConnection: the poller's reused list keeps no
// connection that ended in the slots a longer list left, so their batch
// buffers go with them (a flood's connections held 80 MiB after it).
func TestSnapshotKeepsNoEndedConnection(t *testing.T) {
	pl := &poller{conns: map[int32]*pconn{}}
	for id := int32(1); id <= 100; id++ {
		pl.conns[id] = &pconn{id: id}
	}
	if got := len(pl.list()); got != 100 {
		t.Fatalf("listed %d connections, want 100", got)
	}
	for id := int32(1); id <= 97; id++ {
		delete(pl.conns, id) // ended
	}
	l := pl.list()
	if len(l) != 3 {
		t.Fatalf("listed %d connections, want 3", len(l))
	}
	for i, pc := range l[:cap(l)] {
		if i >= len(l) && pc != nil {
			t.Fatalf("slot %d past the list (of %d) still holds connection %d", i, len(l), pc.id)
		}
	}
}
