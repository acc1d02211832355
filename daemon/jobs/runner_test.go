package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/control"
	"github.com/scavenger-ml/scavenger/daemon/jobindex"
	"github.com/scavenger-ml/scavenger/internal/testnats"
	"github.com/scavenger-ml/scavenger/launchers/local"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// store starts an embedded nats-server with JetStream on a random port and
// opens Scavenger's streams and buckets on it.
func store(t *testing.T) (*nats.Conn, *history.Store) {
	t.Helper()
	return storeWith(t, history.Retention{})
}

// storeWith is store with the streams' retention ret.
func storeWith(t *testing.T, ret history.Retention) (*nats.Conn, *history.Store) {
	t.Helper()
	nc, js := testnats.JetStream(t)
	st, err := history.OpenStore(context.Background(), js, ret)
	if err != nil {
		t.Fatal(err)
	}
	return nc, st
}

// index opens the job index of st, closed at the end of the test.
func index(t *testing.T, st *history.Store) *jobindex.Index {
	t.Helper()
	idx, err := jobindex.Open(t.Context(), st.JobIndex, st.Jobs, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(idx.Close)
	return idx
}

// registry is a registry over an embedded NATS and the local launcher,
// closed at the end of the test.
func registry(t *testing.T) (*Registry, *history.Store, *nats.Conn) {
	t.Helper()
	return registryWith(t, nil)
}

// registryWith is registry with opt applied to its options.
func registryWith(t *testing.T, opt func(*Options)) (*Registry, *history.Store, *nats.Conn) {
	t.Helper()
	return registryOn(t, history.Retention{}, opt)
}

// registryOn is registryWith over streams of retention ret.
func registryOn(t *testing.T, ret history.Retention, opt func(*Options)) (*Registry, *history.Store, *nats.Conn) {
	t.Helper()
	nc, st := storeWith(t, ret)
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	reaper, err := local.StartReaper(context.Background(), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reaper.Stop)
	o := Options{Log: log, Launcher: local.New(local.Options{Logger: log, Reaper: reaper}),
		NC: nc, KV: st.Jobs, Index: index(t, st), Node: "n1", Socket: "/nonexistent.sock", CheckpointRoot: t.TempDir()}
	if opt != nil {
		opt(&o)
	}
	g := New(context.Background(), o)
	t.Cleanup(func() { g.Close(context.Background()) })
	return g, st, nc
}

// checkpointingWorker is an uninstrumented worker that checkpoints into
// SCAV_CHECKPOINT_DIR and exits on SIGUSR1, the job's checkpoint signal.
const checkpointingWorker = `trap 'echo ok > "$SCAV_CHECKPOINT_DIR/ckpt-$SCAV_ATTEMPT-$RANK"; exit 0' USR1
trap 'exit 143' TERM
while :; do sleep 0.02; done`

// TestOneWriterUnderConcurrentRequests runs moves, pre-emption notices and
// decisions on one job at once, then a stop, and checks that the job record
// in the bucket is exactly what the runner last wrote, that no write ever
// carried an older snapshot over a newer one, and that nothing asked for was
// lost: every decision taken and every attempt started is in the record.
func TestOneWriterUnderConcurrentRequests(t *testing.T) {
	g, st, nc := registry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := g.Submit(ctx, api.RunRequest{Command: []string{"/bin/sh", "-c", checkpointingWorker}, Dir: t.TempDir(),
		Config: plugins.Config{Workers: 1, GlobalBatch: 4}, CheckpointSignal: "SIGUSR1", Grace: api.Duration(10 * time.Second)}, me())
	if err != nil {
		t.Fatal(err)
	}
	r := g.running(j.ID)
	if r == nil {
		t.Fatal("no runner")
	}
	revisions := watchRecord(ctx, t, st.Jobs, j.ID)

	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		decisions []int64 // steps of the decisions the runner took, in the order it took them
		moved     int     // moves (user and verdict) that completed
	)
	configs := []plugins.Config{{Workers: 2, GlobalBatch: 4, LRScale: 1}, {Workers: 1, GlobalBatch: 4, LRScale: 1}}
	wg.Add(3)
	go func() { // a user moving the job back and forth
		defer wg.Done()
		for i := 0; i < 3; i++ {
			if _, err := g.Move(ctx, j.ID, configs[i%2], fmt.Sprintf("user move %d", i)); err == nil {
				mu.Lock()
				moved++
				mu.Unlock()
			}
		}
	}()
	go func() { // the controller: decisions that stay, and one that moves
		defer wg.Done()
		for i := 0; i < 12; i++ {
			_, cfg := r.Current()
			to := cfg
			if i == 6 {
				to = configs[0]
			}
			v := control.Verdict{Decision: api.Decision{Time: time.Now().UTC(), Step: int64(i + 1), From: cfg, To: to, Reason: fmt.Sprintf("verdict %d", i),
				Phase: api.PhaseOptimised}, Reply: make(chan error, 1)}
			select {
			case r.verdicts <- v:
			case <-r.done:
				return
			}
			mu.Lock()
			decisions = append(decisions, v.Decision.Step)
			mu.Unlock()
			if to != cfg {
				if err := <-v.Reply; err == nil {
					mu.Lock()
					moved++
					mu.Unlock()
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	go func() { // the scheduler's pre-emption notices
		defer wg.Done()
		for i := 0; i < 20; i++ {
			attempt, _ := r.Current()
			b, _ := json.Marshal(telemetry.StepRecord{V: telemetry.SchemaVersion, Kind: telemetry.KindPreempt, Job: j.ID, Attempt: max(attempt, 1), World: 1, ID: "SIGUSR1"})
			_ = nc.Publish(telemetry.PreemptSubject(j.ID), b)
			time.Sleep(30 * time.Millisecond)
		}
	}()
	wg.Wait()
	if _, err := g.Stop(j.ID, 0); err != nil {
		t.Fatalf("stop: %v", err)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		t.Fatal("the job did not end")
	}

	final := r.snapshot()
	got, err := g.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, final) {
		t.Fatalf("the bucket holds another record than the runner's last:\nbucket %+v\nrunner %+v", got, final)
	}
	if final.State != api.StateStopped && final.State != api.StateSucceeded {
		t.Errorf("state %s (%s), want stopped", final.State, final.Message)
	}
	var steps []int64
	for _, d := range final.Decisions {
		steps = append(steps, d.Step)
	}
	if !reflect.DeepEqual(steps, decisions) {
		t.Errorf("decisions in the record %v, want every one taken, in order: %v", steps, decisions)
	}
	movedAttempts := 0
	for i, a := range final.Attempts {
		if a.Attempt != i+1 {
			t.Errorf("attempt %d recorded as %d", i+1, a.Attempt)
		}
		if a.Ended == nil {
			t.Errorf("attempt %d has no end", a.Attempt)
		}
		if a.Move != nil {
			movedAttempts++
		}
	}
	if movedAttempts < moved {
		t.Errorf("%d attempts ended in a move, but %d moves completed", movedAttempts, moved)
	}
	revs := revisions()
	checkRevisions(t, revs, final)
	t.Logf("%d attempts (%d ended in a move, %d moves completed), %d decisions, %d revisions; %s",
		len(final.Attempts), movedAttempts, moved, len(final.Decisions), len(revs), final.Message)
}

// watchRecord collects every revision of job id's record from now on.
func watchRecord(ctx context.Context, t *testing.T, kv jetstream.KeyValue, id string) func() []api.Job {
	t.Helper()
	w, err := kv.Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		out []api.Job
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var j api.Job
			if json.Unmarshal(e.Value(), &j) == nil {
				mu.Lock()
				out = append(out, j)
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { _ = w.Stop(); <-done })
	return func() []api.Job {
		time.Sleep(200 * time.Millisecond) // the last updates on their way
		mu.Lock()
		defer mu.Unlock()
		return append([]api.Job(nil), out...)
	}
}

// checkRevisions checks that no revision of a record lost what an earlier
// one had (attempts, decisions, ends) and that the last is final.
func checkRevisions(t *testing.T, revs []api.Job, final api.Job) {
	t.Helper()
	if len(revs) == 0 {
		t.Fatal("no revision of the record seen")
	}
	for i := 1; i < len(revs); i++ {
		a, b := revs[i-1], revs[i]
		if len(b.Attempts) < len(a.Attempts) || len(b.Decisions) < len(a.Decisions) {
			t.Errorf("revision %d went back: %d attempts, %d decisions after %d, %d", i, len(b.Attempts), len(b.Decisions), len(a.Attempts), len(a.Decisions))
		}
		for k := range a.Attempts {
			if a.Attempts[k].Ended != nil && (k >= len(b.Attempts) || b.Attempts[k].Ended == nil) {
				t.Errorf("revision %d lost the end of attempt %d", i, k+1)
			}
		}
	}
	if last := revs[len(revs)-1]; !reflect.DeepEqual(last, final) {
		t.Errorf("the last revision is not the final record:\n%+v\n%+v", last, final)
	}
}

// TestCommitRefusesAConflict: a record written by someone else since its
// writer last saw it is never overwritten.
func TestCommitRefusesAConflict(t *testing.T) {
	_, st := store(t)
	ctx := context.Background()
	rec := record{kv: st.Jobs, job: api.Job{ID: "conflict-000001", State: api.StateRunning}}
	if _, err := rec.commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Jobs.Put(ctx, rec.job.ID, []byte(`{"id":"conflict-000001","state":"failed"}`)); err != nil {
		t.Fatal(err)
	}
	rec.job.State = api.StateSucceeded
	if _, err := rec.commit(ctx); !errors.Is(err, ErrConflict) {
		t.Fatalf("commit over another writer's record: %v, want ErrConflict", err)
	}
	got, err := load(ctx, st.Jobs, rec.job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.job.State != api.StateFailed {
		t.Fatalf("the other writer's record was overwritten: %+v", got.job)
	}
	second := record{kv: st.Jobs, job: api.Job{ID: rec.job.ID}}
	if _, err := second.commit(ctx); !errors.Is(err, ErrConflict) {
		t.Fatalf("create over an existing record: %v, want ErrConflict", err)
	}
}

// TestCloseIsBounded: a closing registry gives a job that ignores SIGTERM
// its grace, then kills it, and records it stopped.
func TestCloseIsBounded(t *testing.T) {
	g, _, _ := registry(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	j, err := g.Submit(ctx, api.RunRequest{Command: []string{"/bin/sh", "-c", `trap '' TERM; while :; do sleep 0.02; done`}, Dir: t.TempDir(),
		Config: plugins.Config{Workers: 2}, Grace: api.Duration(time.Second)}, me())
	if err != nil {
		t.Fatal(err)
	}
	r := g.running(j.ID)
	for r.snapshot().State != api.StateRunning {
		time.Sleep(10 * time.Millisecond)
	}
	began := time.Now()
	g.Close(ctx)
	took := time.Since(began)
	if took > killTimeout {
		t.Errorf("Close took %s with a grace of 1s", took)
	}
	final, err := g.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if final.State != api.StateStopped || len(g.Active()) != 0 {
		t.Errorf("after Close: %s (%s), active %v; want stopped, none active", final.State, final.Message, g.Active())
	}
	t.Logf("closed in %s: %s", took.Round(time.Millisecond), final.Message)
}

// me is the test's own user as a job owner.
func me() api.Owner {
	return api.Owner{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid()), User: "me"}
}

// TestVerdictToWhereTheJobRunsIsAnswered: a controller that asked to move
// the job where a user's move has just taken it hears that none was needed
// (it waited for ever: TestOneWriterUnderConcurrentRequests hung so under
// -race, and a live controller would have decided no more).
func TestVerdictToWhereTheJobRunsIsAnswered(t *testing.T) {
	g, _, _ := registry(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	from := plugins.Config{Workers: 1, GlobalBatch: 4, LRScale: 1}
	j, err := g.Submit(ctx, api.RunRequest{Command: []string{"/bin/sh", "-c", checkpointingWorker}, Dir: t.TempDir(),
		Config: from, CheckpointSignal: "SIGUSR1", Grace: api.Duration(10 * time.Second)}, me())
	if err != nil {
		t.Fatal(err)
	}
	r := g.running(j.ID)
	to := plugins.Config{Workers: 2, GlobalBatch: 4, LRScale: 1}
	if _, err := g.Move(ctx, j.ID, to, "user move"); err != nil {
		t.Fatal(err)
	}
	v := control.Verdict{Decision: api.Decision{Time: time.Now().UTC(), Step: 1, From: from, To: to, Reason: "the controller's older view",
		Phase: api.PhaseOptimised}, Reply: make(chan error, 1)}
	r.verdicts <- v
	select {
	case err := <-v.Reply:
		if !errors.Is(err, errAlreadyThere) {
			t.Errorf("the verdict's reply: %v, want %v", err, errAlreadyThere)
		}
	case <-ctx.Done():
		t.Fatal("a verdict to where the job runs was never answered")
	}
	if _, err := g.Stop(j.ID, 0); err != nil {
		t.Fatal(err)
	}
	<-r.done
}
