package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/aggregates"
	"github.com/scavenger-ml/scavenger/daemon/jobindex"
	"github.com/scavenger-ml/scavenger/launchers/local"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// TestExpired: the jobs that leave are those that ended longer ago than
// MaxAge, and the oldest that ended while the node holds more than MaxJobs.
func TestExpired(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ended := func(id string, daysAgo int) api.JobSummary {
		end := now.Add(-time.Duration(daysAgo) * 24 * time.Hour)
		return api.JobSummary{ID: id, State: api.StateSucceeded, Created: end.Add(-time.Hour), Ended: &end}
	}
	jobs := []api.JobSummary{ended("d", 1), ended("a", 200), ended("c", 30), ended("b", 91)}
	for _, c := range []struct {
		name string
		r    Retention
		all  int
		want []string
	}{
		{"the defaults: 90 days", Retention{}, 4, []string{"a", "b"}},
		{"a shorter age", Retention{MaxAge: 7 * 24 * time.Hour}, 4, []string{"a", "b", "c"}},
		{"over the history: the oldest go", Retention{MaxAge: 365 * 24 * time.Hour, MaxJobs: 2}, 4, []string{"a", "b"}},
		{"running jobs count too", Retention{MaxAge: 365 * 24 * time.Hour, MaxJobs: 3}, 5, []string{"a", "b"}},
		{"both", Retention{MaxJobs: 3}, 4, []string{"a", "b"}},
		{"within both", Retention{MaxAge: 365 * 24 * time.Hour}, 4, nil},
	} {
		var got []string
		for _, s := range c.r.Expired(jobs, c.all, now) {
			got = append(got, s.ID)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// indexOf is g's job index.
func indexOf(g *Registry) *jobindex.Index { return g.o.Index.(*jobindex.Index) }

// commitJob writes a job's record and summary as its runner would.
func commitJob(t *testing.T, g *Registry, j api.Job) {
	t.Helper()
	rec := record{kv: g.o.KV, idx: g.o.Index, job: j}
	if _, err := rec.commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSweep: a sweep removes from the store every job retention says goes,
// its record, summary, step records, output, events and step digest, and
// leaves a kept job, a running one, other jobs' history and other nodes'
// jobs alone.
func TestSweep(t *testing.T) {
	g, st, _ := registry(t)
	digests := &aggregates.Store{JS: st.JS, KV: st.StepDigests, Log: g.log}
	g.o.Digests = digests
	ctx := t.Context()
	now := time.Now().UTC()
	old := now.Add(-100 * 24 * time.Hour)
	var ids []string
	for i := 0; i < 6; i++ {
		id := fmt.Sprintf("old-%06d", i)
		ids = append(ids, id)
		j := api.Job{ID: id, Name: "old", Node: "n1", State: api.StateSucceeded, Created: old.Add(time.Duration(i) * time.Minute), Ended: &old}
		if i == 5 {
			j.Node = "n2" // another node's: its daemon sweeps it
		}
		commitJob(t, g, j)
		for _, subj := range []string{telemetry.StepSubject(id), telemetry.LogSubject(id), telemetry.EventSubject(id)} {
			if _, err := st.JS.Publish(ctx, subj, []byte(`{"v":1,"job":"`+id+`","step":1,"world":1}`)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := digests.Current(ctx, j); err != nil {
			t.Fatal(err)
		}
		if _, err := digests.Read(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if err := indexOf(g).Keep(ctx, "old-000001", false); err != nil {
		t.Fatal(err)
	}
	commitJob(t, g, api.Job{ID: "new-000001", Node: "n1", State: api.StateSucceeded, Created: now, Ended: &now})
	commitJob(t, g, api.Job{ID: "run-000001", Node: "n1", State: api.StateRunning, Created: old})
	n, err := g.Sweep(ctx, Retention{}, now)
	if err != nil || n != 4 {
		t.Fatalf("swept %d, %v; want the 4 old ended jobs of n1 not kept", n, err)
	}
	gone := []string{"old-000000", "old-000002", "old-000003", "old-000004"}
	for _, id := range append(ids, "new-000001", "run-000001") {
		_, inIndex := indexOf(g).Get(id)
		_, lerr := g.Get(ctx, id)
		steps := count(t, st.JS, telemetry.StepStream, telemetry.StepSubject(id))
		output := count(t, st.JS, telemetry.OutputStream, telemetry.JobSubjects(id))
		_, digestErr := st.StepDigests.Get(ctx, id)
		if slices.Contains(gone, id) {
			if inIndex || !errors.Is(lerr, api.ErrNoJob) || steps != 0 || output != 0 || !errors.Is(digestErr, jetstream.ErrKeyNotFound) {
				t.Errorf("%s left: in the index %v, record %v, %d step messages, %d output messages, digest %v", id, inIndex, lerr, steps, output, digestErr)
			}
			continue
		}
		if !inIndex || lerr != nil || id != "new-000001" && id != "run-000001" && (steps != 1 || output != 2) {
			t.Errorf("%s removed: in the index %v, record %v, %d step messages, %d output messages", id, inIndex, lerr, steps, output)
		}
	}
	// Past the history: the oldest that ended go, even recent ones; the
	// kept and the running stay.
	if n, err := g.Sweep(ctx, Retention{MaxJobs: 2}, now); err != nil || n != 1 {
		t.Errorf("swept %d, %v over a history of 2; want the one not kept", n, err)
	}
	if _, err := g.Get(ctx, "new-000001"); !errors.Is(err, api.ErrNoJob) {
		t.Errorf("new-000001 after the history sweep: %v", err)
	}
}

// count is the number of messages of stream on subj.
func count(t *testing.T, js jetstream.JetStream, stream, subj string) int {
	t.Helper()
	n := 0
	if err := history.Replay(t.Context(), js, stream, []string{subj}, false, func(jetstream.Msg) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// countingKV is a job bucket that counts the records read from it.
type countingKV struct {
	jetstream.KeyValue
	mu   sync.Mutex
	read []string
}

func (c *countingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	c.mu.Lock()
	c.read = append(c.read, key)
	c.mu.Unlock()
	return c.KeyValue.Get(ctx, key)
}

func (c *countingKV) ListKeys(context.Context, ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	return nil, errors.New("listed every key")
}

func (c *countingKV) WatchAll(context.Context, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return nil, errors.New("watched every key")
}

// TestRecoveryReadsOnlyUnfinishedJobs: a daemon that starts reads the
// records of this node's jobs the index says have not ended (and settles
// them), not the records of the jobs that ended.
func TestRecoveryReadsOnlyUnfinishedJobs(t *testing.T) {
	nc, st := store(t)
	log := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))
	kv := &countingKV{KeyValue: st.Jobs}
	g := New(context.Background(), Options{Log: log, Launcher: local.New(local.Options{Logger: log}),
		NC: nc, KV: kv, Index: index(t, st), Node: "n1", Socket: "/nonexistent.sock", CheckpointRoot: t.TempDir()})
	t.Cleanup(func() { g.Close(context.Background()) })
	t0 := time.Now().Add(-time.Hour).UTC()
	for i := 0; i < 50; i++ {
		commitJob(t, g, api.Job{ID: fmt.Sprintf("done-%06d", i), Node: "n1", State: api.StateSucceeded, Created: t0.Add(time.Duration(i) * time.Second)})
	}
	commitJob(t, g, api.Job{ID: "lost-000001", Node: "n1", State: api.StateRunning, Created: t0, Launcher: "local"})
	commitJob(t, g, api.Job{ID: "lost-000002", Node: "n1", State: api.StateStarting, Created: t0, Launcher: "local"})
	commitJob(t, g, api.Job{ID: "away-000001", Node: "n2", State: api.StateRunning, Created: t0})
	g.Recover(t.Context())
	slices.Sort(kv.read)
	if !slices.Equal(kv.read, []string{"lost-000001", "lost-000002"}) {
		t.Errorf("recovery read %v, want the 2 unfinished jobs of n1 only", kv.read)
	}
	for _, id := range []string{"lost-000001", "lost-000002"} {
		if j, err := g.Get(t.Context(), id); err != nil || j.State != api.StateFailed {
			t.Errorf("%s after recovery: %s, %v; want failed (lost)", id, j.State, err)
		}
		if s, _ := indexOf(g).Get(id); s.State != api.StateFailed {
			t.Errorf("%s's summary after recovery: %s, want failed", id, s.State)
		}
	}
}

// TestEmptyCheckpointDirRemoved: a job that ended without a checkpoint
// leaves no directory under the checkpoint root; one that checkpointed
// keeps its checkpoint.
func TestEmptyCheckpointDirRemoved(t *testing.T) {
	g, _, _ := registry(t)
	run := func(script string) api.Job {
		j, err := g.Submit(context.Background(), api.RunRequest{Command: []string{"/bin/sh", "-c", script}, Dir: t.TempDir(),
			Config: plugins.Config{Workers: 1}}, me())
		if err != nil {
			t.Fatal(err)
		}
		return waitEnd(t, g, j.ID, time.Minute)
	}
	none := run("true")
	if _, err := os.Stat(none.CheckpointDir); !errors.Is(err, os.ErrNotExist) || none.State != api.StateSucceeded {
		t.Errorf("job %s (%s) without a checkpoint left %s: %v", none.ID, none.State, none.CheckpointDir, err)
	}
	some := run(`echo x > "$SCAV_CHECKPOINT_DIR/ckpt-1.pt"`)
	if _, err := os.Stat(filepath.Join(some.CheckpointDir, "ckpt-1.pt")); err != nil {
		t.Errorf("job %s's checkpoint: %v", some.ID, err)
	}
}
