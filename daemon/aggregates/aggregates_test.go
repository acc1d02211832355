package aggregates

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testnats"
	"github.com/scavenger-ml/scavenger/stepstats"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// store opens the streams and buckets on an embedded JetStream.
func store(t *testing.T) (*Store, jetstream.JetStream, *nats.Conn) {
	t.Helper()
	nc, js := testnats.JetStream(t)
	st, err := history.OpenStore(t.Context(), js, history.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	return &Store{JS: js, KV: st.StepDigests, Log: zaptest.NewLogger(t), SaveEvery: 20 * time.Millisecond}, js, nc
}

// hand subscribes to what the step stream republishes of job j and hands
// each message to stored as a job's runner does, but for those skip says
// to leave out (the n-th message, from 0). The subscription's callback
// runs on one goroutine: n needs no lock.
func hand(t *testing.T, nc *nats.Conn, j string, stored func(seq, last uint64, recs []telemetry.StepRecord, bad int), skip func(n int) bool) {
	t.Helper()
	n := 0
	sub, err := nc.Subscribe(telemetry.StoredStepSubject(j), func(m *nats.Msg) {
		seq, last, ok := history.StoredAt(m)
		if !ok {
			t.Errorf("a republished message without its sequences: %v", m.Header)
		}
		if n++; skip(n - 1) {
			return
		}
		recs, bad := telemetry.DecodeBatch(m.Data)
		stored(seq, last, recs, bad)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// publish stores step messages of job j of records from step from to to,
// of 2 ranks, k records a message (the last one shorter).
func publish(t *testing.T, js jetstream.JetStream, j string, from, to int64, k int) {
	t.Helper()
	var msg []byte
	n := 0
	flush := func() {
		if n == 0 {
			return
		}
		if _, err := js.Publish(t.Context(), telemetry.StepSubject(j), msg); err != nil {
			t.Fatal(err)
		}
		msg, n = nil, 0
	}
	for s := from; s <= to; s++ {
		for rank := 0; rank < 2; rank++ {
			loss, local, avg := 3/float64(s), 3+math.Sin(float64(s)), 2.0
			r := telemetry.StepRecord{V: 1, Job: j, Attempt: 1 + int(s/50), Rank: rank, World: 2, Step: s, Time: float64(s) / 10,
				Seconds: 0.1 + float64(s%7)/100, LocalBatch: 16, GlobalBatch: 32, Loss: &loss, LocalSqr: &local, AvgSqr: &avg}
			b, _ := json.Marshal(r)
			msg = append(append(msg, b...), '\n')
			if n++; n == k {
				flush()
			}
		}
	}
	flush()
}

// replayed is what a full replay of job j's step stream adds up to.
func replayed(t *testing.T, js jetstream.JetStream, j string) (stepstats.Aggregate, []telemetry.StepRecord) {
	t.Helper()
	a := stepstats.NewAggregate(32)
	var recs []telemetry.StepRecord
	if err := history.Replay(t.Context(), js, telemetry.StepStream, []string{telemetry.StepSubject(j)}, false, func(m jetstream.Msg) error {
		rs, _ := telemetry.DecodeBatch(m.Data())
		for _, r := range rs {
			a.Add(r)
		}
		recs = append(recs, rs...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return a, recs
}

// TestDigestIsTheReplay: a job's digest, followed while its records are
// stored (saved again and again), then read with the records stored after
// its follower stopped, is what a full replay of its records adds up to:
// the same summary, attempts' step times and live figures. Another job's
// records are not in it.
func TestDigestIsTheReplay(t *testing.T) {
	for _, c := range []struct {
		name string
		skip func(n int) bool
		// current: the saved digest keeps up while the job runs (else it
		// is brought up to date only at the end: nothing reads the stream
		// for it while no message is handed).
		current bool
	}{
		{"every message handed", func(int) bool { return false }, true},
		{"every seventh missed", func(n int) bool { return n%7 == 3 }, true},
		{"none handed", func(int) bool { return true }, false},
	} {
		t.Run(c.name, func(t *testing.T) { digestIsTheReplay(t, c.skip, c.current) })
	}
}

func digestIsTheReplay(t *testing.T, skip func(n int) bool, current bool) {
	s, js, nc := store(t)
	j := api.Job{ID: "digest-000001", Config: api.Job{}.Config, State: api.StateRunning}
	j.Config.GlobalBatch = 32
	publish(t, js, j.ID, 1, 10, 4) // before the daemon followed it (a restarted one's job)
	stored, stop := s.Follow(t.Context(), j)
	hand(t, nc, j.ID, stored, skip)
	for i := int64(0); i < 6; i++ {
		publish(t, js, j.ID, 11+i*30, 40+i*30, 1+int(i)*3)
		publish(t, js, "other-000002", 1, 5, 2)
		time.Sleep(30 * time.Millisecond) // past SaveEvery: saved in between
	}
	stream, err := js.Stream(t.Context(), telemetry.StepStream)
	if err != nil {
		t.Fatal(err)
	}
	newest, err := stream.GetLastMsgForSubject(t.Context(), telemetry.StepSubject(j.ID))
	if err != nil {
		t.Fatal(err)
	}
	var saved Digest
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if saved, _, err = s.load(t.Context(), j); err != nil || saved.Seq == newest.Sequence {
			break
		}
	}
	if kept := saved.Seq == newest.Sequence; kept != current {
		t.Errorf("while the job runs, the saved digest is at %d, the job's newest message at %d: want it kept up to date %v", saved.Seq, newest.Sequence, current)
	}
	stop()
	publish(t, js, j.ID, 191, 260, 2) // after the job ended (a worker's spool, say): more than a reader saves after
	publish(t, js, j.ID, 150, 155, 3) // repeated steps
	j.State = api.StateSucceeded
	d, err := s.Read(t.Context(), j)
	if err != nil {
		t.Fatal(err)
	}
	want, recs := replayed(t, js, j.ID)
	if got := d.Agg; !reflect.DeepEqual(got.Summary(), want.Summary()) || !reflect.DeepEqual(got.AttemptStepS(), want.AttemptStepS()) ||
		got.Live.Step != want.Live.Step || got.Live.NoiseScale() != want.Live.NoiseScale() || got.Live.Rate.PerSecond() != want.Live.Rate.PerSecond() {
		t.Errorf("digest:\n%+v\nreplay:\n%+v", got.Summary(), want.Summary())
	}
	if sum := d.Agg.Summary(); sum.Records != len(recs) || sum.Records != 532 || sum.Duplicates != 12 || sum.LastStep != 260 {
		t.Errorf("summary %+v: want 532 records, 12 duplicated, steps to 260", sum)
	}
	if d.Total != int64(len(recs)) {
		t.Errorf("the digest counts %d records, the stream holds %d", d.Total, len(recs))
	}
	if !reflect.DeepEqual(stepstats.Summarize(recs), want.Summary()) {
		t.Error("Summarize of the replayed records is not their aggregate's summary")
	}
	// The API's form decodes to the same.
	cur, err := s.Current(t.Context(), j)
	if err != nil {
		t.Fatal(err)
	}
	var agg stepstats.Aggregate
	if err := json.Unmarshal(cur.Aggregate, &agg); err != nil || !reflect.DeepEqual(agg.Summary(), want.Summary()) || cur.Seq != d.Seq {
		t.Errorf("the API's digest: %v, %+v", err, agg.Summary())
	}
	// The read that took the records after the end saved them: the next
	// reads nothing more.
	saved, _, err = s.load(t.Context(), j)
	if err != nil || saved.Seq != d.Seq {
		t.Errorf("saved at %d, read at %d (%v): the reader did not save", saved.Seq, d.Seq, err)
	}
	if err := s.Delete(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
	if gone, rev, _ := s.load(t.Context(), j); rev != 0 || gone.Seq != 0 {
		t.Errorf("after Delete: a digest at %d", gone.Seq)
	}
}

// TestStart: a replay from where the digest says the last n records start,
// less the records it says to skip there, is exactly the last n records.
func TestStart(t *testing.T) {
	s, js, _ := store(t)
	j := api.Job{ID: "tail-000001", State: api.StateSucceeded}
	publish(t, js, j.ID, 1, 2000, 3) // 4000 records in messages of 3
	d, err := s.Read(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Marks) < 4 {
		t.Fatalf("%d marks for 4000 records, want one every %d", len(d.Marks), markEvery)
	}
	_, all := replayed(t, js, j.ID)
	for _, n := range []int64{1, 2, 3, 20, 600, 1025, 4000, 5000} {
		after, skip := d.Start(n)
		var got []telemetry.StepRecord
		if err := history.ReplayAfter(t.Context(), js, telemetry.StepStream, []string{telemetry.StepSubject(j.ID)}, after, false, func(m jetstream.Msg) error {
			rs, _ := telemetry.DecodeBatch(m.Data())
			got = append(got, rs...)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		got = got[min(int(skip), len(got)):]
		want := all[max(0, len(all)-int(n)):]
		if !reflect.DeepEqual(got, want) {
			t.Errorf("last %d: %d records from step %d, want %d (from %d; read after %d, skip %d)", n, len(got), first(got), len(want), first(want), after, skip)
		}
		if int(skip) >= markEvery+3 {
			t.Errorf("last %d: %d records read to skip, more than the marks' spacing", n, skip)
		}
	}
}

func first(rs []telemetry.StepRecord) int64 {
	if len(rs) == 0 {
		return 0
	}
	return rs[0].Step
}
