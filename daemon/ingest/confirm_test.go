package ingest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// confirmConn is a worker's connection to a real socket: it writes lines and
// reads the daemon's "stored" confirmations.
type confirmConn struct {
	t     *testing.T
	c     net.Conn
	r     *bufio.Reader
	lines int64 // lines written so far
}

func dialConfirm(t *testing.T, in *Server, key Key, confirm bool) *confirmConn {
	t.Helper()
	c, err := net.Dial("unix", in.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cc := &confirmConn{t: t, c: c, r: bufio.NewReader(c)}
	cc.write(fmt.Sprintf(`{"v":1,"kind":"hello","job":"a-000001","attempt":1,"rank":0,"world":1,"step":0,"t":1,"token":%q,"confirm":%v}`,
		key.Token("a-000001", 1), confirm))
	return cc
}

func (cc *confirmConn) write(lines ...string) {
	cc.t.Helper()
	cc.lines += int64(len(lines))
	if _, err := cc.c.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		cc.t.Fatal(err)
	}
}

// stored reads confirmations until one confirms want lines, for up to d,
// and returns the last one's Lines (0: none came).
func (cc *confirmConn) stored(want int64, d time.Duration) int64 {
	cc.t.Helper()
	var last int64
	_ = cc.c.SetReadDeadline(time.Now().Add(d))
	for last < want {
		line, err := cc.r.ReadBytes('\n')
		if err != nil {
			return last
		}
		var m telemetry.Control
		if err := json.Unmarshal(line, &m); err != nil || m.Kind != telemetry.ControlStored {
			cc.t.Fatalf("the daemon wrote %q, want a stored confirmation", line)
		}
		last = m.Lines
	}
	return last
}

func stepLines(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf(`{"v":1,"job":"a-000001","attempt":1,"rank":0,"world":1,"step":%d,"t":1,"dt":0.1,"samples":8}`, i))
	}
	return out
}

func listenConfirm(t *testing.T, store *fullStore) (*Server, Key) {
	t.Helper()
	dir := t.TempDir()
	key, err := LoadKey(filepath.Join(dir, "key"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := Listen(filepath.Join(dir, "s.sock"), &collector{msgs: map[string][][]byte{}}, Options{Log: zap.NewNop(), Verify: key.Verify, Steps: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	return in, key
}

// TestLinesAreConfirmedOnceStored: a worker whose hello asks is told how many
// of its lines the daemon is done with, only once their records are stored
// (a full store holds them: no confirmation until it takes them); a
// refused line counts as done with; a worker that did not ask is told
// nothing.
func TestLinesAreConfirmedOnceStored(t *testing.T) {
	store := &fullStore{}
	store.full.Store(true)
	in, key := listenConfirm(t, store)
	w := dialConfirm(t, in, key, true)
	w.write(append(stepLines(1, 100), `{"v":1,"job":"a-000001"`)...)
	if n := w.stored(2, 300*time.Millisecond); n > 1 {
		t.Fatalf("confirmed %d lines while the store held every record", n)
	}
	store.full.Store(false)
	if n := w.stored(102, 30*time.Second); n != 102 {
		t.Fatalf("confirmed %d lines, want 102 (the hello, 100 records, a malformed line)", n)
	}
	if got := store.taken(); got != 100 {
		t.Fatalf("stored %d records once confirmed, want 100", got)
	}
	w.write(stepLines(101, 110)...)
	if n := w.stored(112, 30*time.Second); n != 112 || store.taken() != 110 {
		t.Fatalf("confirmed %d lines with %d records stored, want 112 and 110", n, store.taken())
	}

	quiet := dialConfirm(t, in, key, false)
	quiet.write(stepLines(111, 120)...)
	if n := quiet.stored(1, 300*time.Millisecond); n != 0 {
		t.Fatalf("a worker that did not ask was confirmed %d lines", n)
	}
}

// TestCloseConfirmsWhatItStored: a daemon that stops ends the reading side
// of each connection, stores what it read and confirms exactly that before
// it closes: what a worker was told is stored, and the rest it will send
// again.
func TestCloseConfirmsWhatItStored(t *testing.T) {
	store := &fullStore{}
	in, key := listenConfirm(t, store)
	w := dialConfirm(t, in, key, true)
	w.write(stepLines(1, 50)...)
	if n := w.stored(51, 30*time.Second); n != 51 {
		t.Fatalf("confirmed %d lines, want 51", n)
	}
	w.write(stepLines(51, 100)...)
	in.Close()
	n := w.stored(101, 30*time.Second)
	if n < 51 || int(n-1) != store.taken() {
		t.Fatalf("confirmed %d lines (the hello included) with %d records stored: want every stored record confirmed and nothing more", n, store.taken())
	}
	t.Logf("confirmed %d of 101 lines at close", n)
}
