package storecheck

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/internal/damage"
)

// store is a real nats-server with JetStream whose StoreDir is state,
// stopped by close.
type store struct {
	ns *server.Server
	nc *nats.Conn
	js jetstream.JetStream
}

func openStore(t *testing.T, state string) *store {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: state, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.InProcessServer(ns))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	s := &store{ns: ns, nc: nc, js: js}
	t.Cleanup(s.close)
	return s
}

func (s *store) close() {
	s.nc.Close()
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

const (
	jobs  = 31
	steps = 3000
)

// fill makes a key-value bucket of jobs keys (each written 5 times, the
// last value naming its revision) and a stream of steps records, as the
// daemon's job store and step stream are.
func fill(t *testing.T, state string) {
	t.Helper()
	s := openStore(t, state)
	ctx := context.Background()
	kv, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "jobs", History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 1200)
	for i := range jobs {
		for k := range 5 {
			if _, err := kv.Put(ctx, fmt.Sprintf("job%02d", i), fmt.Appendf(nil, `{"n":%d,"pad":%q}`, k, pad)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "STEPS", Subjects: []string{"job.*.step"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	for i := range steps {
		if _, err := s.js.Publish(ctx, fmt.Sprintf("job.j%d.step", i%7), fmt.Appendf(nil, `{"step":%d,"loss":0.5,"samples":64}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	s.close()
}

// aside is where a test's repair keeps what it takes out.
func aside(t *testing.T) string { return filepath.Join(filepath.Dir(t.TempDir()), "aside") }

// block is the path of stream's first block under state.
func block(state, stream string) string {
	return filepath.Join(state, "jetstream", "$G", "streams", stream, "msgs", "1.blk")
}

// readable counts, within a deadline, the bucket's keys that can be read and
// the stream's messages.
func readable(t *testing.T, state string) (keys, msgs int) {
	t.Helper()
	s := openStore(t, state)
	defer s.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := s.js.KeyValue(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		if _, err := kv.Get(ctx, fmt.Sprintf("job%02d", i)); err == nil {
			keys++
		}
	}
	st, err := s.js.Stream(ctx, "STEPS")
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := c.FetchNoWait(500)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for range b.Messages() {
			n++
		}
		if n == 0 || ctx.Err() != nil {
			return keys, msgs
		}
		msgs += n
	}
}

// TestCheckCleanStoreTouchesNothing: a well store reports no damage, and
// repair changes no file.
func TestCheckCleanStoreTouchesNothing(t *testing.T) {
	state := t.TempDir()
	fill(t, state)
	before, _ := os.ReadFile(block(state, "KV_jobs"))
	rep, err := Check(state, Options{Repair: true, Aside: aside(t)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Damaged() || rep.Aside != "" || len(rep.Lines()) > 0 {
		t.Fatalf("clean store reported damaged: %+v", rep)
	}
	if s := rep.Stream("STEPS"); s.Records != steps || s.Blocks != 1 {
		t.Fatalf("STEPS: %+v, want %d records", s, steps)
	}
	after, _ := os.ReadFile(block(state, "KV_jobs"))
	if string(before) != string(after) {
		t.Fatal("repair rewrote a clean block")
	}
	if _, err := os.Stat(filepath.Join(state, "jetstream", "$G", "streams", "KV_jobs", "msgs", "index.db")); err != nil {
		t.Fatalf("the index of a clean stream is gone: %v", err)
	}
}

// TestRepairKeepsTheRecordsAfterTheDamage: garbage inside a block costs the
// records it overwrote, not the rest of the block; the damaged block is kept
// aside; a check after the repair finds the store well.
func TestRepairKeepsTheRecordsAfterTheDamage(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		frac         float64
		size         int
	}{
		{"512 B in the job bucket's block", "KV_jobs", 0.9, 512},
		{"4 KB in the step stream's block", "STEPS", 0.3, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			fill(t, state)
			path := block(state, tc.stream)
			damage.Garbage(t, path, int64(float64(damage.Size(t, path))*tc.frac), tc.size)
			// The server alone, on a copy: it cuts the block at the damage.
			alone := filepath.Join(t.TempDir(), "alone")
			if err := os.CopyFS(alone, os.DirFS(state)); err != nil {
				t.Fatal(err)
			}
			keysAlone, msgsAlone := -1, -1
			if tc.stream == "STEPS" { // (a key-value read of the damage hangs until its deadline)
				keysAlone, msgsAlone = readable(t, alone)
			}
			check, err := Check(state, Options{})
			if err != nil {
				t.Fatal(err)
			}
			s := check.Stream(tc.stream)
			if !check.Damaged() || s.BadBytes < int64(tc.size) || s.Lost < 1 || check.Aside != "" {
				t.Fatalf("check: %+v", check)
			}
			rep, err := Check(state, Options{Repair: true, Aside: aside(t)})
			if err != nil {
				t.Fatal(err)
			}
			s = rep.Stream(tc.stream)
			t.Logf("%s", strings.Join(rep.Lines(), "\n"))
			if !s.Repaired || rep.Aside != filepath.Join(filepath.Dir(state), "aside") {
				t.Fatalf("repair: %+v", rep)
			}
			if _, err := os.Stat(filepath.Join(rep.Aside, "$G", tc.stream, "msgs", "1.blk")); err != nil {
				t.Fatalf("the damaged block was not kept: %v", err)
			}
			again, err := Check(state, Options{})
			if err != nil || again.Damaged() {
				t.Fatalf("after the repair: %+v, %v", again, err)
			}
			keys, msgs := readable(t, state)
			lostKeys, lostMsgs := jobs-keys, steps-msgs
			t.Logf("lost %d keys of %d, %d records of %d (the check counted %d); the server alone: %d keys, %d records readable", lostKeys, jobs, lostMsgs, steps, s.Lost, keysAlone, msgsAlone)
			switch tc.stream {
			case "KV_jobs":
				// 512 bytes overwrite at most one 1.3 KB value and the one after.
				if lostKeys > 2 || msgs != steps {
					t.Fatalf("lost %d keys, %d records", lostKeys, lostMsgs)
				}
			case "STEPS":
				// A record is ~70 bytes: 4 KB hold at most ~60.
				if lostMsgs > 4096/60+2 || lostMsgs != s.Lost || keys != jobs || msgsAlone >= msgs {
					t.Fatalf("lost %d records (the check counted %d), %d keys", lostMsgs, s.Lost, lostKeys)
				}
			}
		})
	}
}

// TestCheckFindsACutTail: a block cut short ends with part of a record:
// at least one record lost, and a repair makes the block whole.
func TestCheckFindsACutTail(t *testing.T) {
	state := t.TempDir()
	fill(t, state)
	path := block(state, "STEPS")
	st, _ := os.Stat(path)
	if err := os.Truncate(path, st.Size()-30); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(state, Options{Repair: true, Aside: aside(t)})
	if err != nil {
		t.Fatal(err)
	}
	if s := rep.Stream("STEPS"); !s.LostMore || s.Lost != 1 || !s.Repaired {
		t.Fatalf("STEPS: %+v", s)
	}
	if _, msgs := readable(t, state); msgs != steps-1 {
		t.Fatalf("%d records readable, want %d", msgs, steps-1)
	}
}

// TestUnreadableMetadataIsMovedAside: a stream whose metadata does not
// match its checksum (the server would not load it, and a stream made
// afresh over its files would mix them) is moved aside whole.
func TestUnreadableMetadataIsMovedAside(t *testing.T) {
	state := t.TempDir()
	fill(t, state)
	damage.Garbage(t, filepath.Join(state, "jetstream", "$G", "streams", "STEPS", "meta.inf"), 100, 4)
	rep, err := Check(state, Options{Repair: true, Aside: aside(t)})
	if err != nil {
		t.Fatal(err)
	}
	if s := rep.Stream("STEPS"); s.Problem == "" || s.Records != steps {
		t.Fatalf("STEPS: %+v", s)
	}
	if _, err := os.Stat(filepath.Join(state, "jetstream", "$G", "streams", "STEPS")); !os.IsNotExist(err) {
		t.Fatalf("the stream is still in the store: %v", err)
	}
	if _, err := os.Stat(filepath.Join(rep.Aside, "$G", "STEPS", "meta.inf")); err != nil {
		t.Fatalf("not kept aside: %v", err)
	}
}
