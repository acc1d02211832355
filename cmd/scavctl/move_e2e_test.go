package main

import (
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
)

// stepScript is an uninstrumented worker that prints "step N" lines (which
// scavd reads its progress off) and, on SIGUSR1 (--checkpoint-signal),
// exits as if it had checkpointed.
const stepScript = `trap 'echo "checkpointed"; exit 0' USR1
i=${SCAV_START_STEP:-0}
while :; do i=$((i+1)); echo "step $i"; sleep 0.2; done`

// TestMovePinHoldsAJobUntilUnpinned: a job whose policy (full) would probe
// the other configuration at its first report stays where it is once
// pinned (scavctl move --pin), for report after report; unpinned, its
// policy moves it; and a move by hand without --pin says that the policy
// may move the job again.
func TestMovePinHoldsAJobUntilUnpinned(t *testing.T) {
	state := stateDir(t)
	startOwnScavd(t, state, "scavd")
	out, errOut, code := scavctl(t, state, "run", "-d", "--name", "pinme", "--workers", "1:2", "--batch-size", "32",
		"--policy", "full", "--target-steps", "100000", "--checkpoint-signal", "SIGUSR1", "--grace", "5s", "--", "/bin/sh", "-c", stepScript)
	if code != 0 {
		t.Fatalf("run -d: exit %d\n%s%s", code, out, errOut)
	}
	id := strings.TrimSpace(out)
	if _, e, code := scavctl(t, state, "move", id, "--pin"); code != 0 || !strings.Contains(e, "pinned there: its policy moves it no more until scavctl move "+id+" --unpin") {
		t.Fatalf("move --pin: exit %d, %q", code, e)
	}
	time.Sleep(6 * time.Second) // 30 steps: three of the policy's reports
	j := jobRecord(t, state, id)
	if j.Attempt != 1 || !j.Pinned || j.State != api.StateRunning {
		t.Fatalf("pinned job: attempt %d, pinned %v, %s %q; want attempt 1, pinned, running", j.Attempt, j.Pinned, j.State, j.Message)
	}
	if _, e, code := scavctl(t, state, "move", id, "--unpin"); code != 0 || !strings.Contains(e, "unpinned: its policy (full) may move it again") {
		t.Fatalf("move --unpin: exit %d, %q", code, e)
	}
	j = awaitJob(t, state, id, "a move by the policy", func(j api.Job) bool { return j.Attempt >= 2 && j.State == api.StateRunning })
	if j.Pinned || j.Config.Workers != 2 {
		t.Fatalf("after the release: pinned %v, %d workers; want the policy's probe of 2 workers", j.Pinned, j.Config.Workers)
	}
	if _, e, code := scavctl(t, state, "move", id, "--workers", "1"); code != 0 || !strings.Contains(e, "its policy (full) may move it again at its next decision (scavctl move "+id+" --pin keeps it here)") {
		t.Fatalf("move by hand: exit %d, %q", code, e)
	}
	scavctl(t, state, "stop", id)
}
