package slurm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/internal/testslurm"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/plugins/conformance"
)

// TestMultiNodeCluster runs the launcher on a real cluster of three
// namespace nodes (testslurm Options.Nodes), in this order, each scenario
// on what the previous ones left: a 2-node job by submission; a 2-node job
// requeued after one of its nodes was drained, which runs again on other
// nodes from its checkpoint; 2-node steps inside a --no-kill allocation of
// the three nodes, the node of one step lost mid-step (named in
// Result.LostHosts, left out of Capabilities), the next step on the other
// two from the checkpoint; then a 2-node submitted job on those two, one
// of them lost mid-job (the requeued job cancelled, the node in
// LostHosts), the next attempt on the last node from the checkpoint.
func TestMultiNodeCluster(t *testing.T) {
	c := testslurm.Start(t, testslurm.Options{Nodes: 3, CPUs: 4})
	t.Run("SubmittedTwoNodes", func(t *testing.T) { testTwoNodes(t, c, "") })
	t.Run("RequeueAcrossNodes", func(t *testing.T) { testRequeueAcrossNodes(t, c) })
	// Made after the submitted jobs, which would wait for its CPUs otherwise.
	alloc := c.HoldNoKill(t, 2)
	t.Run("StepsTwoNodes", func(t *testing.T) { testTwoNodes(t, c, alloc) })
	if t.Failed() {
		return
	}
	t.Run("NodeLostInAllocation", func(t *testing.T) { testNodeLost(t, c, alloc) })
	if t.Failed() {
		return
	}
	t.Run("NodeLostSubmitted", func(t *testing.T) { testNodeLost(t, c, "") })
}

// hostOf returns the host a rank's "up HOST from STEP" line names.
func hostOf(t *testing.T, out *lines, rank int) (host string, from int) {
	t.Helper()
	for _, s := range out.of(rank) {
		if f := strings.Fields(s); len(f) == 5 && f[1] == "up" {
			from, _ = strconv.Atoi(f[4])
			return f[2], from
		}
	}
	t.Fatalf("rank %d printed no up line: %q", rank, out.of(rank))
	return "", 0
}

// startTwoNodes starts script as 2 workers on 2 nodes, their output into
// out, and returns the attempt and its spec.
func startTwoNodes(t *testing.T, ctx context.Context, l plugins.Launcher, script string, out *lines) (plugins.Handle, plugins.AttemptSpec) {
	t.Helper()
	sp := conformance.ShellSpec(t, 2, script, out.add)
	sp.Config.Nodes = 2
	h, err := l.Start(ctx, sp)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return h, sp
}

// testTwoNodes runs a 2-worker attempt on 2 nodes (a step of alloc, or
// submitted when alloc is empty): its ranks run on two different nodes.
func testTwoNodes(t *testing.T, c *testslurm.Cluster, alloc string) {
	ctx := testCtx(t, 60*time.Second)
	l := newLauncher(t, c, alloc, nil)
	var out lines
	h, _ := startTwoNodes(t, ctx, l, `echo "up $(hostname) from 0"`, &out)
	if res, err := h.Wait(ctx); err != nil || res.ExitCode != 0 || len(res.LostHosts) > 0 {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
	h0, _ := hostOf(t, &out, 0)
	h1, _ := hostOf(t, &out, 1)
	if h0 == h1 || !slices.Contains(c.Nodes, h0) || !slices.Contains(c.Nodes, h1) {
		t.Errorf("ranks ran on %q and %q: want two different nodes of %v", h0, h1, c.Nodes)
	}
	t.Logf("%s: ranks on %s and %s", h.ID(), h0, h1)
}

// resumable is a worker of total steps of 0.1 s: it starts after the step
// in dir/ckpt, which rank 0 rewrites (atomically) after each step. With two
// ranks, neither begins a step before the other has done the previous one
// (as a collective makes them wait): a rank whose peer is lost stops there.
func resumable(dir string, total int) string {
	return fmt.Sprintf(`d=%s; ck=$d/ckpt; i=$(cat "$ck" 2>/dev/null || echo 0)
at() { echo "$2" > "$d/at-$1-$SCAV_ATTEMPT.$$"; mv "$d/at-$1-$SCAV_ATTEMPT.$$" "$d/at-$1-$SCAV_ATTEMPT"; }
echo "up $(hostname) from $i"; at "$RANK" "$i"
while [ "$i" -lt %d ]; do
	if [ "$WORLD_SIZE" = 2 ]; then
		while [ "$(cat "$d/at-$((1-RANK))-$SCAV_ATTEMPT" 2>/dev/null || echo 0)" -lt "$i" ]; do sleep 0.02; done
	fi
	i=$((i+1)); sleep 0.1
	if [ "$RANK" = 0 ]; then echo "$i" > "$ck.$$"; mv "$ck.$$" "$ck"; fi
	echo "step $i"; at "$RANK" "$i"
done
echo "done $i"`, dir, total)
}

// steps returns the steps a rank printed, in order.
func steps(out *lines, rank int) []int {
	var s []int
	for _, l := range out.of(rank) {
		if v, ok := strings.CutPrefix(l, "stdout: step "); ok {
			n, _ := strconv.Atoi(v)
			s = append(s, n)
		}
	}
	return s
}

// testRequeueAcrossNodes drains one node of a running 2-node job and
// requeues the job: it runs again, released from its BeginTime hold, on
// nodes that do not include the drained one, from its checkpoint.
func testRequeueAcrossNodes(t *testing.T, c *testslurm.Cluster) {
	ctx := testCtx(t, 90*time.Second)
	l := newLauncher(t, c, "", nil)
	var out lines
	dir := t.TempDir()
	h, _ := startTwoNodes(t, ctx, l, resumable(dir, 40), &out)
	t.Cleanup(func() { _ = h.Stop(context.Background(), 0) })
	out.await(t, ctx, 0, "step 5")
	first, _ := hostOf(t, &out, 0)
	if _, err := c.Run(ctx, "scontrol", "update", "NodeName="+first, "State=DRAIN", "Reason=scavenger-test"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Run(context.Background(), "scontrol", "update", "NodeName="+first, "State=RESUME") })
	begin := time.Now()
	if _, err := c.Run(ctx, "scontrol", "requeue", h.ID()); err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(ctx)
	if err != nil || res.ExitCode != 0 || len(res.LostHosts) > 0 {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
	// The second run's lines follow the first's: the last "up" lines.
	var hosts []string
	from := -1
	for r := range 2 {
		for _, s := range out.of(r) {
			if f := strings.Fields(s); len(f) == 5 && f[1] == "up" {
				if r == 0 {
					from, _ = strconv.Atoi(f[4])
				}
				hosts = append(hosts, f[2])
			}
		}
	}
	if len(hosts) != 4 {
		t.Fatalf("up lines of both runs: %q; rank 0 %q", hosts, out.of(0))
	}
	again := []string{hosts[1], hosts[3]}
	if slices.Contains(again, first) || again[0] == again[1] {
		t.Errorf("the requeued job ran again on %v: want two nodes, not the drained %s", again, first)
	}
	if from < 5 {
		t.Errorf("the requeued run started from step %d, want the checkpoint (5 or later)", from)
	}
	if s := steps(&out, 0); s[len(s)-1] != 40 {
		t.Errorf("rank 0 steps %v", s)
	}
	t.Logf("requeued: ran on %s and %v, again on %v from step %d; done %.1f s after the requeue",
		first, hosts, again, from, time.Since(begin).Seconds())
}

// testNodeLost loses the node of rank 1 of a 2-node attempt (a step of
// alloc, or submitted when alloc is empty) mid-run: the attempt ends with
// the node in Result.LostHosts; Capabilities no longer offers it; the next
// attempt, on the nodes left (as many as are, two at most), resumes from
// rank 0's checkpoint and finishes, with no step lost.
func testNodeLost(t *testing.T, c *testslurm.Cluster, alloc string) {
	ctx := testCtx(t, 120*time.Second)
	l := newLauncher(t, c, alloc, nil)
	caps, err := l.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const total = 40
	var out lines
	h, sp := startTwoNodes(t, ctx, l, resumable(dir, total), &out)
	t.Cleanup(func() { _ = h.Stop(context.Background(), 0) })
	out.await(t, ctx, 1, "step 10")
	host0, _ := hostOf(t, &out, 0)
	host1, _ := hostOf(t, &out, 1)
	lost := slices.Index(c.Nodes, host1)
	if lost < 0 || host0 == host1 {
		t.Fatalf("ranks on %s and %s", host0, host1)
	}
	begin := time.Now()
	if err := c.LoseNode(lost); err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(ctx)
	ended := time.Since(begin)
	if err != nil || !slices.Equal(res.LostHosts, []string{host1}) {
		t.Fatalf("Wait = %+v, %v; want %s lost", res, err, host1)
	}
	before := steps(&out, 0)
	after, err := l.Capabilities(ctx)
	if err != nil || slices.Contains(after.Hosts, host1) || len(after.Hosts) != len(caps.Hosts)-1 {
		t.Fatalf("Capabilities after the loss: %+v, %v (before: %+v)", after, err, caps)
	}

	// The daemon's relaunch: the next attempt on what is left.
	var out2 lines
	sp2 := sp
	sp2.Attempt, sp2.Output = 2, out2.add
	sp2.Config.Nodes = min(2, len(after.Hosts))
	h2, err := l.Start(ctx, sp2)
	if err != nil {
		t.Fatalf("Start attempt 2: %v", err)
	}
	t.Cleanup(func() { _ = h2.Stop(context.Background(), 0) })
	out2.await(t, ctx, 0, "up ")
	resumed := time.Since(begin)
	res2, err := h2.Wait(ctx)
	if err != nil || res2.ExitCode != 0 || len(res2.LostHosts) > 0 {
		t.Fatalf("attempt 2: Wait = %+v, %v", res2, err)
	}
	a0, from := hostOf(t, &out2, 0)
	a1, _ := hostOf(t, &out2, 1)
	if a0 == host1 || a1 == host1 || (sp2.Config.Nodes == 2 && a0 == a1) {
		t.Errorf("attempt 2 ran on %s and %s (lost: %s)", a0, a1, host1)
	}
	last := 0
	if len(before) > 0 {
		last = before[len(before)-1]
	}
	// Rank 0 checkpoints a step before it prints it.
	if from < last || from > last+1 || from == 0 {
		t.Errorf("attempt 2 started after step %d; rank 0 had printed steps %v", from, before)
	}
	if s := steps(&out2, 0); len(s) == 0 || s[0] != from+1 || s[len(s)-1] != total {
		t.Errorf("attempt 2's steps %v, want %d to %d", s, from+1, total)
	}
	t.Logf("%s lost (rank 0 then at step %d): attempt 1 (%s) ended %.1f s later with LostHosts %v; attempt 2 (%s on %s, %s) ran from step %d %.1f s after the loss",
		host1, last, h.ID(), ended.Seconds(), res.LostHosts, h2.ID(), a0, a1, from, resumed.Seconds())
	if b, err := os.ReadFile(filepath.Join(dir, "ckpt")); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(total) {
		t.Errorf("checkpoint %q, %v", b, err)
	}
}
