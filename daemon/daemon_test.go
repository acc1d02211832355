package daemon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/ingest"
	"github.com/scavenger-ml/scavenger/internal/testdir"
	"github.com/scavenger-ml/scavenger/internal/testnats"
	"github.com/scavenger-ml/scavenger/launchers/builtin"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// startDaemon runs a real daemon (embedded nats-server with JetStream on a
// random port, state in a temporary directory) and a client connected to it.
func startDaemon(t *testing.T) (*Daemon, *api.Client) {
	t.Helper()
	return startDaemonWith(t, "scavd-test-", Config{Listen: "127.0.0.1:0"})
}

// startDaemonWith runs a daemon of cfg, its state in a temporary directory
// named after prefix, and a client connected to it; both are closed and
// the directory removed when t ends.
func startDaemonWith(t *testing.T, prefix string, cfg Config) (*Daemon, *api.Client) {
	t.Helper()
	ctx := context.Background()
	cfg.StateDir = testdir.Short(t, prefix)
	d, err := Start(ctx, cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatalf("start daemon: %v", err)
	}
	c, err := api.Dial(ctx, d.APISocket(), 5*time.Second)
	if err != nil {
		d.Close()
		t.Fatalf("dial daemon: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		if err := d.Close(); err != nil {
			t.Errorf("close daemon: %v", err)
		}
	})
	return d, c
}

// liveJob runs a job on d whose attempt has workers workers (one sleeping
// process: the test writes the workers' telemetry itself) and returns its
// id once it runs: a hello binds only a running attempt's connection.
func liveJob(t *testing.T, d *Daemon, c *api.Client, workers int) string {
	t.Helper()
	ctx := context.Background()
	j, err := c.Run(ctx, api.RunRequest{Command: []string{"sleep", "600"}, Dir: d.cfg.StateDir, Mode: plugins.ModeSelf,
		Config: plugins.Config{Workers: workers}, Grace: api.Duration(time.Second)})
	if err != nil {
		t.Fatalf("run a job to bind telemetry to: %v", err)
	}
	t.Cleanup(func() { _, _ = c.Stop(ctx, j.ID, time.Second) })
	eventually(t, "the job running", 30*time.Second, func() bool {
		j, err = c.Job(ctx, j.ID)
		return err == nil && j.State == api.StateRunning
	})
	return j.ID
}

// startDaemonSlots is startDaemon with a local launcher of slots slots.
func startDaemonSlots(t *testing.T, slots int) (*Daemon, *api.Client) {
	t.Helper()
	l, release, err := builtin.Open(context.Background(), "local", builtin.Options{LocalSlots: slots}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	d, c := startDaemonWith(t, "scavd-test-", Config{Listen: "127.0.0.1:0", Launcher: l})
	t.Cleanup(release) // after the daemon's close (cleanups run last first)
	return d, c
}

// helloLine is the hello that binds a connection to job's first attempt,
// with the token d gives it.
func helloLine(t *testing.T, d *Daemon, job string) string {
	t.Helper()
	key, err := ingest.LoadKey(filepath.Join(d.cfg.StateDir, "telemetry.key"))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`{"v":1,"kind":"hello","job":%q,"attempt":1,"rank":0,"world":1,"step":0,"t":1,"token":%q}`, job, key.Token(job, 1))
}

// natsConn connects to d's NATS server as d does (with its key).
func natsConn(t *testing.T, d *Daemon) *nats.Conn {
	t.Helper()
	return testnats.Connect(t, d.URL(), filepath.Join(d.cfg.StateDir, "nats.nk"))
}

// storedSteps hands fn the step records of job in d's stream, read as the
// daemon reads them (the API serves only the steps of jobs it knows).
func storedSteps(t *testing.T, d *Daemon, job string, fn func(telemetry.StepRecord)) error {
	t.Helper()
	js, err := jetstream.New(natsConn(t, d))
	if err != nil {
		return err
	}
	return history.Replay(context.Background(), js, telemetry.StepStream, []string{telemetry.StepSubject(job)}, false, func(m jetstream.Msg) error {
		recs, _ := telemetry.DecodeBatch(m.Data())
		for _, r := range recs {
			fn(r)
		}
		return nil
	})
}

func stepLine(job string, rank, world int, step int64) string {
	return fmt.Sprintf(`{"v":1,"job":%q,"attempt":1,"rank":%d,"world":%d,"step":%d,"t":%f,"dt":0.01,"samples":8,"local_sqr":2,"avg_sqr":1}`,
		job, rank, world, step, float64(time.Now().UnixNano())/1e9)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestIngestDropsGarbageAndKeepsServing(t *testing.T) {
	d, c := startDaemon(t)
	ctx := context.Background()
	job := liveJob(t, d, c, 1)

	// A writer that sends half a line and then nothing must not stall the others.
	stuck, err := net.Dial("unix", d.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	if _, err := stuck.Write([]byte(`{"v":1,"job":"stuck"`)); err != nil {
		t.Fatal(err)
	}

	w, err := net.Dial("unix", d.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	lines := []string{
		helloLine(t, d, job),
		stepLine(job, 0, 1, 1),
		`this is not json`,
		`{"v":99,"job":"` + job + `"}`,
		strings.Replace(stepLine(job, 0, 1, 2), `"rank":0`, `"rank":5`, 1),
		`{"v":1,"pad":"` + strings.Repeat("y", 200<<10) + `"}`, // longer than the read buffer
		"\x00\x01\x02\xff",
		stepLine(job, 0, 1, 2),
	}
	if _, err := w.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "2 accepted records", 10*time.Second, func() bool { return d.IngestStats().Accepted == 2 })
	eventually(t, "drop counters", 5*time.Second, func() bool {
		s := d.IngestStats().Dropped
		return s[telemetry.DropMalformed] == 2 && s[telemetry.DropVersion] == 1 && s[telemetry.DropInvalid] == 1 && s[telemetry.DropOversized] == 1
	})
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("daemon stopped answering after garbage: %v", err)
	}
	var steps []int64
	if err := storedSteps(t, d, job, func(r telemetry.StepRecord) { steps = append(steps, r.Step) }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(steps) != "[1 2]" {
		t.Fatalf("stream holds steps %v, want [1 2]", steps)
	}
}

// TestLastStoredSteps reads what the telemetry socket's marks are seeded
// with after a restart: the steps of an attempt's last stored records, by
// rank, from the real stream; none for another attempt or a job with no
// records.
func TestLastStoredSteps(t *testing.T) {
	d, c := startDaemon(t)
	job := liveJob(t, d, c, 1)
	w, err := net.Dial("unix", d.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	lines := []string{helloLine(t, d, job)}
	for s := int64(1); s <= 30; s++ {
		lines = append(lines, stepLine(job, 0, 1, s))
	}
	if _, err := w.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "30 accepted records", 10*time.Second, func() bool { return d.IngestStats().Accepted == 30 })
	js, err := jetstream.New(natsConn(t, d))
	if err != nil {
		t.Fatal(err)
	}
	read := lastStoredSteps(js)
	ctx := context.Background()
	eventually(t, "the 30 records in the stream", 10*time.Second, func() bool {
		got, err := read(ctx, job, 1)
		return err == nil && len(got[0]) == 30
	})
	got, err := read(ctx, job, 1)
	if err != nil || len(got) != 1 || got[0][0] != 1 || got[0][29] != 30 {
		t.Fatalf("stored steps of attempt 1: %v, %v; want rank 0's 1-30", got, err)
	}
	if got, err := read(ctx, job, 2); err != nil || len(got) != 0 {
		t.Errorf("stored steps of attempt 2: %v, %v; want none", got, err)
	}
	if got, err := read(ctx, "nobody-000001", 1); err != nil || got != nil {
		t.Errorf("stored steps of a job with no records: %v, %v; want none", got, err)
	}
}

func TestIngestManyWritersLoseNothing(t *testing.T) {
	const writers, per = 8, 500
	d, c := startDaemonSlots(t, writers)
	job := liveJob(t, d, c, writers)
	hello := helloLine(t, d, job)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("unix", d.Socket())
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			var b bytes.Buffer
			b.WriteString(hello + "\n")
			for s := int64(1); s <= per; s++ {
				b.WriteString(stepLine(job, w, writers, s))
				b.WriteByte('\n')
			}
			if _, err := conn.Write(b.Bytes()); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	eventually(t, "all records accepted", 20*time.Second, func() bool { return d.IngestStats().Accepted == writers*per })
	seen := map[[2]int64]int{}
	err := storedSteps(t, d, job, func(r telemetry.StepRecord) { seen[[2]int64{int64(r.Rank), r.Step}]++ })
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != writers*per {
		t.Fatalf("stream holds %d distinct (rank, step), want %d", len(seen), writers*per)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("rank %d step %d stored %d times", k[0], k[1], n)
		}
	}
}

func TestJoinsExternalNATS(t *testing.T) {
	seed, pub := testnats.Key(t)
	ns := testnats.Server(t, pub)
	state := testdir.Short(t, "scavd-ext-")
	ctx := context.Background()
	d, err := Start(ctx, Config{StateDir: state, NATSURL: ns.ClientURL(), NATSKey: seed}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatalf("start daemon on external NATS: %v", err)
	}
	defer d.Close()
	if d.URL() != ns.ClientURL() {
		t.Errorf("daemon URL %s, want the external server's %s", d.URL(), ns.ClientURL())
	}
	if _, err := os.Stat(filepath.Join(state, "jetstream")); err == nil {
		t.Errorf("a daemon joining external NATS created an embedded store")
	}
	c, err := api.Dial(ctx, d.APISocket(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	j, lines, final := runAndWatch(t, c, api.RunRequest{Command: []string{"/bin/echo", "hello"}, Dir: state, Config: plugins.Config{Workers: 1}}, nil)
	if j.State != api.StateSucceeded || len(lines) != 1 || lines[0].Line != "hello" || *final.ExitCode != 0 {
		t.Fatalf("job on external NATS: state %s, lines %v, final %+v", j.State, lines, final)
	}
}

func TestUnreachableNATSIsAClearError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = Start(context.Background(), Config{StateDir: t.TempDir(), NATSURL: url}, zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), url) {
		t.Fatalf("Start with unreachable NATS = %v, want an error naming %s", err, url)
	}
}

func TestOneDaemonPerStateDir(t *testing.T) {
	d, _ := startDaemon(t)
	_, err := Start(context.Background(), Config{StateDir: d.cfg.StateDir, Listen: "127.0.0.1:0"}, zap.NewNop())
	if !errors.Is(err, ErrStateInUse) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second daemon on %s: %v, want ErrStateInUse naming pid %d", d.cfg.StateDir, err, os.Getpid())
	}
	if _, err := os.Stat(d.Socket()); err != nil {
		t.Fatalf("the refused daemon removed the first one's socket: %v", err)
	}
}

func TestControlReachesWorkersAndAcksComeBack(t *testing.T) {
	d, c := startDaemon(t)
	job := liveJob(t, d, c, 1)
	nc := natsConn(t, d)
	acks := make(chan []byte, 4)
	sub, err := nc.Subscribe(telemetry.AckSubject(job), func(m *nats.Msg) { acks <- m.Data })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	w, err := net.Dial("unix", d.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte(helloLine(t, d, job) + "\n")); err != nil {
		t.Fatal(err)
	}
	// The hello registers the connection; publish until the worker hears it.
	want := telemetry.Control{Kind: telemetry.ControlCheckpoint, ID: "d1", Job: job, Attempt: 1, AfterStep: 7, Dir: "/ckpt"}
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(w).ReadString('\n')
		got <- line
	}()
	var line string
	for deadline := time.Now().Add(10 * time.Second); line == ""; {
		if err := nc.Publish(telemetry.ControlSubject(job), want.Encode()); err != nil {
			t.Fatal(err)
		}
		select {
		case line = <-got:
		case <-time.After(50 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("the worker never received the control message")
			}
		}
	}
	dec, err := telemetry.DecodeControl([]byte(line))
	if err != nil || dec.Kind != want.Kind || dec.AfterStep != 7 || dec.Dir != "/ckpt" || dec.V != telemetry.SchemaVersion {
		t.Fatalf("worker read %q (%v), want %+v", line, err, want)
	}
	if _, err := w.Write([]byte(`{"v":1,"kind":"ack","id":"d1","job":"` + job + `","attempt":1,"rank":0,"world":1,"step":7,"t":2,"checkpoint":"/ckpt/s7.pt"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-acks:
		r, err := telemetry.DecodeStep(a)
		if err != nil || r.Kind != telemetry.KindAck || r.ID != "d1" || r.Checkpoint != "/ckpt/s7.pt" {
			t.Fatalf("ack %q (%v)", a, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no ack published")
	}
	if s := d.IngestStats(); s.Accepted != 0 || len(s.Dropped) != 0 {
		t.Errorf("control messages counted as steps or drops: %+v", s)
	}
}

// movableScript checkpoints on SIGUSR1 by convention (a file in
// SCAV_CHECKPOINT_DIR) and exits; a later attempt reports and ends.
const movableScript = `trap 'echo "world $WORLD_SIZE" > "$SCAV_CHECKPOINT_DIR/ckpt-$SCAV_ATTEMPT"; exit 0' USR1
echo "attempt $SCAV_ATTEMPT world $WORLD_SIZE rank $RANK restore=$SCAV_RESTORE"
if [ "$SCAV_ATTEMPT" -ge 2 ]; then exit 0; fi
while :; do sleep 0.05; done`
