package jobs

import (
	"fmt"
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

// TestOneUsersOutputLeavesAnothersLogs: issue 20's seventh attack, scaled
// down. Bob's job prints a few lines; then mallory's jobs, one after the
// other, print far more than the output history holds. Bob's lines are all
// still there: mallory's jobs pushed out only her own older output.
func TestOneUsersOutputLeavesAnothersLogs(t *testing.T) {
	mallory, bob := testuser.Add(t, "m"), testuser.Add(t, "b")
	g, st, _ := registryOn(t, history.Retention{LogMaxBytes: 1 << 20}, func(o *Options) {
		o.CheckpointRoot = filepath.Join(testuser.SharedDir(t), "ckpt")
		o.OutputPerUser = 256 << 10
	})
	owner := func(u testuser.User) api.Owner {
		return api.Owner{UID: uint32(u.UID), GID: uint32(u.GID), User: u.Name, Home: "/"}
	}
	run := func(u testuser.User, script string) api.Job {
		t.Helper()
		j, err := g.Submit(t.Context(), api.RunRequest{Command: []string{"/bin/sh", "-c", script}, Dir: "/",
			Config: plugins.Config{Workers: 1}, Env: []string{"PATH=/usr/bin:/bin"}}, owner(u))
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			got, err := g.Get(t.Context(), j.ID)
			if err == nil && got.State.Done() && g.running(j.ID) == nil {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s did not end", j.ID)
			}
		}
	}
	lines := func(job string) int {
		t.Helper()
		n := 0
		err := history.ReplayAfter(t.Context(), st.JS, telemetry.OutputStream, []string{telemetry.LogSubject(job), telemetry.LogTailSubject(job)}, 0, false,
			func(jetstream.Msg) error { n++; return nil })
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	bobs := run(bob, "for i in 1 2 3 4 5 6 7 8 9 10; do echo bob line $i; done")
	if n := lines(bobs.ID); n != 10 {
		t.Fatalf("bob's job: %d lines stored, want 10", n)
	}
	// Eight jobs of 1500 lines of 100 bytes (some 300 KiB each in the
	// history): 2.4 MiB into a history of 1 MiB.
	for i := range 8 {
		run(mallory, fmt.Sprintf(`i=0; while [ $i -lt 1500 ]; do printf '%%099d\n' %d; i=$((i+1)); done`, i))
	}
	if n := lines(bobs.ID); n != 10 {
		t.Errorf("bob's job has %d of its 10 lines left after mallory's output", n)
	}
}
