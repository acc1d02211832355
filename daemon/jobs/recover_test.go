package jobs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testuser"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// TestRecoverPublishesTheSpoolAndSettlesFinishedJobs: issue 21's first
// row. A daemon dies while a job without checkpoints runs; its two workers
// finish meanwhile and leave their last step records and their ends in the
// spool, as the job's owner. The next daemon publishes every spooled record
// and records the job succeeded, not failed; a job one of whose ranks left
// no clean end is recorded lost; and a job an earlier daemon recorded lost
// whose ends turn up later is recorded succeeded then.
func TestRecoverPublishesTheSpoolAndSettlesFinishedJobs(t *testing.T) {
	mallory := testuser.Add(t, "m")
	g, st, _ := registry(t)
	ctx := t.Context()
	now := time.Now().UTC()
	jobs := map[string]struct {
		codes []int // each rank's end (none: -1)
		lost  bool  // recorded lost by an earlier daemon
		want  api.JobState
	}{
		"finished-000001": {codes: []int{0, 0}, want: api.StateSucceeded},
		"crashed-000001":  {codes: []int{0, 3}, want: api.StateFailed},
		"killed-000001":   {codes: []int{0, -1}, want: api.StateFailed},
		"lostthen-000001": {codes: []int{0, 0}, lost: true, want: api.StateSucceeded},
	}
	for id, c := range jobs {
		j := userJob(t, mallory, id)
		j.Name, j.Node, j.Launcher, j.Attempt, j.State = id, "n1", g.o.Launcher.Name(), 1, api.StateRunning
		j.Config = plugins.Config{Workers: 2}
		j.Attempts = []api.Attempt{{Attempt: 1, Config: j.Config, Started: now}}
		if c.lost {
			code := -1
			j.State, j.Ended, j.ExitCode = api.StateFailed, &now, &code
			j.Attempts[0].Ended, j.Attempts[0].EndReason = &now, endLost
		}
		rec := record{kv: st.Jobs, idx: g.o.Index, job: j}
		if _, err := rec.commit(ctx); err != nil {
			t.Fatal(err)
		}
		spool := filepath.Join(j.CheckpointDir, spoolDir)
		mallory.Do(t, func() {
			if err := os.Mkdir(spool, 0o700); err != nil {
				t.Error(err)
				return
			}
			for rank, code := range c.codes {
				var text string
				for step := int64(1); step <= 50; step++ {
					b, _ := json.Marshal(telemetry.StepRecord{V: 1, Job: id, Attempt: 1, Rank: rank, World: 2, Step: step, Time: 1.7e9})
					text += string(b) + "\n"
				}
				if code >= 0 {
					b, _ := json.Marshal(telemetry.StepRecord{V: 1, Kind: telemetry.KindEnd, Job: id, Attempt: 1, Rank: rank, World: 2, Step: 50, Time: 1.7e9, ExitCode: &code})
					text += string(b) + "\n"
				}
				name := filepath.Join(spool, "a1-r"+string(rune('0'+rank))+"-7-000001.jsonl")
				if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
					t.Error(err)
				}
			}
		})
	}
	g.Recover(ctx)
	for id, c := range jobs {
		j, err := g.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != c.want {
			t.Errorf("%s: %s (%s); want %s", id, j.State, j.Message, c.want)
		}
		n := 0
		err = history.ReplayAfter(ctx, st.JS, telemetry.StepStream, []string{telemetry.StepSubject(id)}, 0, false, func(m jetstream.Msg) error {
			recs, _ := telemetry.DecodeBatch(m.Data())
			n += len(recs)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n != 100 {
			t.Errorf("%s: %d step records stored of the 100 spooled", id, n)
		}
		if _, err := os.Lstat(filepath.Join(j.CheckpointDir, spoolDir)); !os.IsNotExist(err) {
			t.Errorf("%s: the spool is left (%v)", id, err)
		}
	}
}
