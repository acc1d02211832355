package ingest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/internal/testdir"
	"github.com/scavenger-ml/scavenger/internal/testuser"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// limitsServer is a socket with limits whose attempts are those of live
// (job a-000001 attempt 1 runs, with workers and a start a second ago);
// more sets further options.
func limitsServer(t *testing.T, store Publisher, l Limits, live func() bool, window time.Duration, more ...func(*Options)) (*Server, Key) {
	t.Helper()
	dir := testdir.Short(t, "ingest")
	key, err := LoadKey(filepath.Join(dir, "key"))
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now().Add(-time.Second)
	attempts := func(_ context.Context, job string, attempt int) (Attempt, bool) {
		if job != "a-000001" || attempt != 1 || !live() {
			return Attempt{}, false
		}
		return Attempt{Workers: 2, StartStep: 0, Started: started}, true
	}
	o := Options{Log: zap.NewNop(), Verify: key.Verify, Steps: store, Attempts: attempts, Limits: l, Window: window}
	for _, f := range more {
		f(&o)
	}
	in, err := Listen(filepath.Join(dir, "s.sock"), &collector{msgs: map[string][][]byte{}}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	return in, key
}

func always() bool { return true }

// hello is the hello line of rank's worker of a-000001's attempt 1.
func hello(key Key, rank int, session string) string {
	return fmt.Sprintf(`{"v":1,"kind":"hello","job":"a-000001","attempt":1,"rank":%d,"world":2,"step":0,"t":%f,"token":%q,"confirm":true,"session":%q}`,
		rank, now(), key.Token("a-000001", 1), session)
}

// record is rank's step record of a-000001's attempt 1.
func record(rank int, step int64) string { return recordAt(rank, step, now()) }

// recordAt is record at time t.
func recordAt(rank int, step int64, t float64) string {
	return fmt.Sprintf(`{"v":1,"job":"a-000001","attempt":1,"rank":%d,"world":2,"step":%d,"t":%f,"dt":0.01}`, rank, step, t)
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// ended reports whether the daemon ended c (EOF, or a reset) within d.
func ended(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

// TestDuplicatesAfterAStallStoredOnce: a worker whose first connection
// stalled sends its unconfirmed records again on a second one, and the
// daemon then reads both: each record is stored once. Records of another
// session (a restarted worker process) and of no session are all stored.
func TestDuplicatesAfterAStallStoredOnce(t *testing.T) {
	store := &fullStore{}
	in, key := limitsServer(t, store, Limits{}, always, 0)
	first := dialLines(t, in, hello(key, 0, "s1"))
	for s := int64(1); s <= 50; s++ {
		first.write(record(0, s))
	}
	second := dialLines(t, in, hello(key, 0, "s1"))
	for s := int64(1); s <= 80; s++ {
		second.write(record(0, s))
	}
	other := dialLines(t, in, hello(key, 0, "s2"))
	for s := int64(1); s <= 10; s++ {
		other.write(record(0, s))
	}
	for _, w := range []*confirmConn{first, second, other} {
		w.stored(w.lines, 30*time.Second)
	}
	if got := store.taken(); got != 90 {
		t.Errorf("stored %d records, want 80 of session s1 and 10 of s2", got)
	}
	if d := in.Stats().Dropped[DropDuplicate]; d != 50 {
		t.Errorf("%d copies dropped, want 50", d)
	}
}

// TestCopiesOfAPreviousDaemonsRecordsDropped: workers whose daemon died
// after storing their last records and before confirming them send them
// again to the next daemon, whose marks are new: it reads what the store
// holds of the attempt (once), drops the copies of what it holds and stores
// the rest.
func TestCopiesOfAPreviousDaemonsRecordsDropped(t *testing.T) {
	store := &fullStore{}
	var reads atomic.Int32
	stored := func(_ context.Context, job string, attempt int) (map[int][]int64, error) {
		reads.Add(1)
		if job != "a-000001" || attempt != 1 {
			return nil, fmt.Errorf("read job %s attempt %d, want a-000001 attempt 1", job, attempt)
		}
		var zero []int64 // rank 0: 1-20 but 15 (a batch the store refused)
		for s := int64(1); s <= 20; s++ {
			if s != 15 {
				zero = append(zero, s)
			}
		}
		return map[int][]int64{0: zero, 1: {16, 17, 18}}, nil
	}
	in, key := limitsServer(t, store, Limits{}, always, 0, func(o *Options) { o.Stored = stored })
	zero := dialLines(t, in, hello(key, 0, "s1"))
	for s := int64(11); s <= 25; s++ {
		zero.write(record(0, s))
	}
	one := dialLines(t, in, hello(key, 1, "s2"))
	for s := int64(17); s <= 20; s++ {
		one.write(record(1, s))
	}
	for _, w := range []*confirmConn{zero, one} {
		if n := w.stored(w.lines, 30*time.Second); n != w.lines {
			t.Fatalf("confirmed %d of %d lines", n, w.lines)
		}
	}
	if got := store.taken(); got != 8 {
		t.Errorf("stored %d records, want 8 (rank 0: 15 and 21-25; rank 1: 19 and 20)", got)
	}
	if d := in.Stats().Dropped[DropDuplicate]; d != 11 {
		t.Errorf("%d copies dropped, want 11 (rank 0: 11-14 and 16-20; rank 1: 17 and 18)", d)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("the store was read %d times for the attempt, want once", n)
	}
}

// bound waits (up to 10 s) until n connections of job a-000001 are bound.
func bound(t *testing.T, in *Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); connected(in, "a-000001") != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections of a-000001 bound after 10 s, want %d", connected(in, "a-000001"), n)
		}
	}
}

// dialLines connects a worker and writes its hello; lines counts the lines
// it wrote.
func dialLines(t *testing.T, in *Server, hello string) *confirmConn {
	t.Helper()
	c, err := net.Dial("unix", in.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	w := &confirmConn{t: t, c: c, r: bufio.NewReader(c)}
	w.write(hello)
	return w
}

// TestRecordsOutsideTheirAttemptRefused: values the attempt cannot have
// are refused and counted; the rest are stored (issue 21: step 2^63-1, t
// = 1e300 and rank 999999 of a world of a million were stored for a
// 1-worker job).
func TestRecordsOutsideTheirAttemptRefused(t *testing.T) {
	store := &fullStore{}
	in, key := limitsServer(t, store, Limits{}, always, 0)
	w := dialLines(t, in, hello(key, 0, ""))
	bad := []string{
		strings.Replace(record(0, 1), `"world":2`, `"world":3`, 1), // a world above its workers
		strings.Replace(strings.Replace(record(0, 1), `"world":2`, `"world":1000000`, 1), `"rank":0`, `"rank":999999`, 1),
		record(0, 1<<40),           // a step it cannot have reached
		recordAt(0, 2, now()-3600), // a time before it started
		strings.Replace(record(0, 3), `"dt":0.01`, `"dt":86400`, 1), // a step longer than its life
	}
	w.write(append(bad, record(0, 4), record(1, 4))...)
	w.stored(w.lines, 30*time.Second)
	s := in.Stats()
	if store.taken() != 2 || s.Dropped[DropOutOfRange] != int64(len(bad)) {
		t.Errorf("stored %d, refused %d as out of range; want 2 and %d (%v)", store.taken(), s.Dropped[DropOutOfRange], len(bad), s.Dropped)
	}
}

// TestProgressIsTheFurthestStep: after a restart the daemon asks a lost
// job's workers to checkpoint past the furthest step any of them reached,
// which their hellos (where each was when it connected) and records since
// say; a hello's step past what the attempt can have reached does not
// count.
func TestProgressIsTheFurthestStep(t *testing.T) {
	in, key := limitsServer(t, &fullStore{}, Limits{}, always, 0)
	at := func(rank int, step int64) string {
		return strings.Replace(hello(key, rank, ""), `"step":0`, fmt.Sprintf(`"step":%d`, step), 1)
	}
	ahead := dialLines(t, in, at(0, 300))
	behind := dialLines(t, in, at(1, 120))
	bound(t, in, 2)
	if n, step := in.Progress("a-000001"); n != 2 || step != 300 {
		t.Errorf("progress %d connections at step %d, want 2 at 300 (rank 0's hello)", n, step)
	}
	behind.write(record(1, 121), record(1, 350))
	behind.stored(behind.lines, 30*time.Second)
	if _, step := in.Progress("a-000001"); step != 350 {
		t.Errorf("progress at step %d, want 350 (rank 1's newest record)", step)
	}
	ahead.c.Close()
	behind.c.Close()
	bound(t, in, 0)
	far := dialLines(t, in, at(0, 1<<45))
	bound(t, in, 1)
	if _, step := in.Progress("a-000001"); step >= 1<<45 {
		t.Errorf("progress at step %d: a hello's step the attempt cannot have reached counts", step)
	}
	far.c.Close()
}

// TestHelloOfAnEndedAttemptRefused: once an attempt has ended its token
// binds nothing (issue 20: a finished attempt's hello replayed 1000
// records), and the connection is ended so that a worker whose attempt is
// not known yet (a restarting daemon) tries again; records on a connection
// whose attempt ended are refused after the grace.
func TestHelloOfAnEndedAttemptRefused(t *testing.T) {
	store := &fullStore{}
	var running atomic.Bool
	running.Store(true)
	in, key := limitsServer(t, store, Limits{Grace: time.Millisecond}, running.Load, 0)
	bound := dialLines(t, in, hello(key, 0, ""))
	bound.write(record(0, 1))
	bound.stored(bound.lines, 30*time.Second)
	running.Store(false)
	late := dialLines(t, in, hello(key, 1, ""))
	late.write(record(1, 1))
	if !ended(late.c, 10*time.Second) {
		t.Error("the connection of an ended attempt's hello was not ended")
	}
	time.Sleep(1100 * time.Millisecond) // the next record rechecks its attempt: ended, it is within the grace
	bound.write(record(0, 2))
	bound.stored(bound.lines, 30*time.Second)
	time.Sleep(10 * time.Millisecond) // past the grace
	bound.write(record(0, 3))
	bound.stored(bound.lines, 30*time.Second)
	s := in.Stats()
	if store.taken() != 2 || s.Dropped[DropEnded] != 2 || s.Refused[RefusedEnded] != 1 {
		t.Errorf("stored %d, dropped %v, refused %v; want 2 stored, the hello and the record past the grace refused", store.taken(), s.Dropped, s.Refused)
	}
}

// TestIdleAndHellolessConnectionsEnded: a connection that sends no valid
// hello, and a bound one that goes silent, are ended; one that writes an
// empty line now and then stays (issue 21: idle telemetry connections were
// held for ever).
func TestIdleAndHellolessConnectionsEnded(t *testing.T) {
	in, key := limitsServer(t, &fullStore{}, Limits{HelloTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}, always, 0)
	silent, _ := net.Dial("unix", in.Path())
	defer silent.Close()
	idle := dialLines(t, in, hello(key, 0, ""))
	kept := dialLines(t, in, hello(key, 1, ""))
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				_, _ = kept.c.Write([]byte("\n"))
			}
		}
	}()
	if !ended(silent, 10*time.Second) || !ended(idle.c, 10*time.Second) {
		t.Fatal("a silent connection was kept")
	}
	if ended(kept.c, time.Second) {
		t.Fatal("a connection that writes empty lines was ended")
	}
	s := in.Stats()
	if s.Refused[RefusedNoHello] != 1 || s.Refused[RefusedIdle] != 1 {
		t.Errorf("refused %v, want one without a hello and one idle", s.Refused)
	}
}

// TestConnectionsPerJobBounded: a hello past the job's bound is refused and
// its connection ended.
func TestConnectionsPerJobBounded(t *testing.T) {
	in, key := limitsServer(t, &fullStore{}, Limits{ConnsPerJob: 3}, always, 0)
	var conns []*confirmConn
	for i := 0; i < 5; i++ {
		w := dialLines(t, in, hello(key, 0, ""))
		w.write(record(0, int64(i+1)))
		conns = append(conns, w)
	}
	endedN := 0
	for _, w := range conns {
		if ended(w.c, time.Second) {
			endedN++
		}
	}
	if s := in.Stats(); endedN != 2 || s.Refused[RefusedJobConns] != 2 || connected(in, "a-000001") != 3 {
		t.Errorf("%d connections ended, refused %v, %d bound; want 2, 2, 3", endedN, s.Refused, connected(in, "a-000001"))
	}
}

// TestRefusedConnectionThatWritesOnIsEnded: a worker refused at the job's
// bound that ignores the EOF and writes on is not read any more: its lines
// are counted without being decoded and its connection ends (issue 20:
// in its flood scavd decoded a million lines of such connections only to
// drop them).
func TestRefusedConnectionThatWritesOnIsEnded(t *testing.T) {
	in, key := limitsServer(t, &fullStore{}, Limits{ConnsPerJob: 1}, always, 0)
	dialLines(t, in, hello(key, 0, ""))
	bound(t, in, 1) // so that the second is the one refused (the poller may read two hellos in any order)
	w := dialLines(t, in, hello(key, 1, ""))
	_ = w.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := w.c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("the refused connection read %d bytes, %v; want EOF", n, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for sent := 0; err == nil; sent++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d records written on a refused connection, and it was not ended", sent)
		}
		_, err = w.c.Write([]byte(record(1, int64(sent+1)) + "\n"))
		time.Sleep(time.Millisecond)
	}
	if s := in.Stats(); s.Dropped[DropUnbound] == 0 || connected(in, "a-000001") != 1 {
		t.Errorf("dropped %v, %d bound; want its lines dropped as unbound, 1 bound", s.Dropped, connected(in, "a-000001"))
	}
}

// TestClosedConnectionIsEndedOnceRead: a worker that writes as fast as
// its user's step bytes allow and then closes has its connection ended as
// soon as its last records are read, not at the idle timeout (issue 20's
// flood: the hangup's one event came with data, the poller read the data
// and not the EOF behind it, and left 512 closed connections, with their
// buffers, open for minutes).
func TestClosedConnectionIsEndedOnceRead(t *testing.T) {
	u := testuser.Add(t, "s")
	in, key := limitsServer(t, &fullStore{}, Limits{StepBytesPerSecond: 200 << 10, StepBurst: 200 << 10}, always, 0)
	if err := os.Chmod(filepath.Dir(in.Path()), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(in.Path(), 0o666); err != nil {
		t.Fatal(err)
	}
	var c net.Conn
	var err error
	u.Do(t, func() { c, err = net.Dial("unix", in.Path()) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(hello(key, 0, "") + "\n")); err != nil {
		t.Fatal(err)
	}
	var recs []byte
	for i := range 500 {
		recs = append(append(recs, recordAt(0, int64(i+1), now())...), '\n')
	}
	written := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		n, _ := c.Write(recs) // one cut by its deadline leaves a broken line, dropped
		written += n
	}
	c.Close()
	closed := time.Now()
	for connected(in, "a-000001") > 0 {
		if time.Since(closed) > 10*time.Second {
			t.Fatalf("%d KiB written in 2 s at a bound of 200 KiB/s: the connection was still not ended 10 s after it closed", written>>10)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s := in.Stats(); s.Refused[RefusedStepBytes] == 0 {
		t.Errorf("refused %v: the user never waited for step bytes", s.Refused)
	}
}

// TestWrongTokensLimited: past the burst of wrong tokens, a user's
// connections are cut off (this test runs its workers as one user).
func TestWrongTokensLimited(t *testing.T) {
	in, _ := limitsServer(t, &fullStore{}, Limits{BadTokens: 0.001, BadTokenBurst: 5}, always, 0)
	wrong := strings.Replace(hello(Key("0123456789abcdef"), 0, ""), `"token":"`, `"token":"x`, 1)
	for i := 0; i < 20; i++ {
		c, err := net.Dial("unix", in.Path())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte(wrong + "\n"))
		ended(c, time.Second)
		c.Close()
	}
	s := in.Stats()
	if s.Dropped[DropUnbound] > 6 || s.Refused[RefusedBadTokens] == 0 {
		t.Errorf("%d wrong tokens checked, %d connections refused; want at most the burst checked", s.Dropped[DropUnbound], s.Refused[RefusedBadTokens])
	}
}

// TestRecordsOfManyConnectionsShareMessages: records that several
// connections write within the window are published in one message per job.
func TestRecordsOfManyConnectionsShareMessages(t *testing.T) {
	store := &countingStore{}
	in, key := limitsServer(t, store, Limits{}, always, 2*time.Second)
	var conns []*confirmConn
	for i := 0; i < 16; i++ {
		conns = append(conns, dialLines(t, in, hello(key, i%2, "")))
	}
	for i, w := range conns {
		w.write(record(i%2, int64(i+1)))
	}
	for _, w := range conns {
		if got := w.stored(w.lines, 30*time.Second); got != w.lines {
			t.Fatalf("confirmed %d of %d lines", got, w.lines)
		}
	}
	if store.records.Load() != 16 || store.messages.Load() > 2 {
		t.Errorf("%d records in %d messages; want 16 records in one or two", store.records.Load(), store.messages.Load())
	}
}

// countingStore counts the messages and records it takes.
type countingStore struct {
	messages, records atomic.Int64
}

func (s *countingStore) Publish(_ string, data []byte) error {
	s.messages.Add(1)
	s.records.Add(int64(strings.Count(string(data), "\n")))
	return nil
}

// TestAttemptBoundSaturates: the step bound of an attempt that went on from
// a step near the largest does not wrap around.
func TestAttemptBoundSaturates(t *testing.T) {
	a := Attempt{Workers: 1, StartStep: math.MaxInt64 - 5, Started: time.Now().Add(-time.Hour)}
	r := telemetry.StepRecord{World: 1, Step: math.MaxInt64, Time: now()}
	if err := a.check(&r, time.Now()); err != nil {
		t.Errorf("a step below the saturated bound refused: %v", err)
	}
}

// connected is how many connections a hello bound to job.
func connected(in *Server, job string) int {
	n, _ := in.Progress(job)
	return n
}
