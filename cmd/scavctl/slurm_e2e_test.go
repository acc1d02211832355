package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/scavenger-ml/scavenger/internal/testslurm"
)

// slurmCluster starts a private Slurm whose prolog and epilog are scavctl's
// hooks for the daemon on state, and points this test's commands at it.
func slurmCluster(t *testing.T, state string) *testslurm.Cluster {
	t.Helper()
	hooks := t.TempDir()
	for _, h := range []string{"prolog", "epilog"} {
		script := fmt.Sprintf("#!/bin/sh\nexec %s --state-dir %s slurm %s --log %s\n", scavctlBin, state, h, filepath.Join(hooks, "hooks.log"))
		if err := os.WriteFile(filepath.Join(hooks, h+".sh"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := testslurm.Start(t, testslurm.Options{CPUs: 8, Prolog: filepath.Join(hooks, "prolog.sh"), Epilog: filepath.Join(hooks, "epilog.sh")})
	c.Setenv(t)
	return c
}

// startSlurmScavd runs scavd with the slurm launcher on state; it is
// stopped (SIGTERM) at the end of the test unless it has been waited for.
func startSlurmScavd(t *testing.T, state string) *exec.Cmd {
	t.Helper()
	d := exec.Command(scavdBinary(t), "--state-dir", state, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--launcher", "slurm",
		"--slurm-grace", "5s", "--slurm-poll", "200ms", "--slurm-work-dir", t.TempDir())
	dlog := startDaemon(t, d, "scavd")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if info, err := api.ReadDiscovery(state); err == nil && info.PID == d.Process.Pid {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("scavd did not start:\n%s", dlog.String())
		}
	}
}

// awaitAttempt polls until job id has step records from attempt n and
// returns its record.
func awaitAttempt(t *testing.T, state, id string, n int) api.Job {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		for _, r := range steps(t, state, id) {
			if r.Attempt == n {
				return jobRecord(t, state, id)
			}
		}
		if j := jobRecord(t, state, id); time.Now().After(deadline) || j.State.Done() {
			t.Fatalf("job %s did not step in attempt %d: %+v", id, n, j)
		}
	}
}

// TestSlurmSubmittedJobMovesAndIsPreempted runs a 2-worker PyTorch job
// through a scavd whose launcher submits every attempt with sbatch: a move
// to 1 worker is a new batch job; `scancel --signal=USR1 --batch`, Slurm's
// pre-emption warning, makes the job checkpoint, and the next batch job
// resumes from that checkpoint. The prolog and epilog hooks report every
// batch job to the scavd.
func TestSlurmSubmittedJobMovesAndIsPreempted(t *testing.T) {
	needTorch(t)
	state := stateDir(t)
	c := slurmCluster(t, state)
	startSlurmScavd(t, state)
	cmd, _, errOut := startJob(t, state, "--name", "sbatched", "--workers", "2", "--batch-size", "32", "--env", "OMP_NUM_THREADS=1",
		"--", pythonBin, "examples/resumable_cnn.py", "--steps", "800")
	id := waitForRecords(t, state, errOut, 2*30)
	if _, e, code := scavctl(t, state, "move", id, "--workers", "1"); code != 0 {
		t.Fatalf("scavctl move: exit %d\n%s", code, e)
	}
	j := awaitAttempt(t, state, id, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := c.Run(ctx, "scancel", "--signal=USR1", "--batch", j.Attempts[1].Handle); err != nil {
		t.Fatalf("scancel: %v\n%s", err, out)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("scavctl run: %v\n%s", err, errOut.String())
	}
	j = jobRecord(t, state, id)
	a := j.Attempts
	if j.State != api.StateSucceeded || len(a) != 3 || a[0].Config.Workers != 2 || a[1].Config.Workers != 1 ||
		!strings.Contains(a[1].EndReason, "pre-empted") || a[2].Restore == "" || a[2].Config.Workers != 1 {
		t.Fatalf("job record %+v: want 3 attempts (2 workers; 1; 1 after the pre-emption, restored)", j)
	}
	checkEveryStepOnce(t, steps(t, state, id))
	// Every batch job is a Slurm job of its own that the hooks reported.
	for _, at := range a {
		key := "slurm." + at.Handle
		var al api.Allocation
		for deadline := time.Now().Add(20 * time.Second); al.Ended == nil; time.Sleep(200 * time.Millisecond) {
			if al = allocation(t, state, key); time.Now().After(deadline) {
				t.Fatalf("allocation %s after the job: %+v; want reported by the prolog and the epilog", key, al)
			}
		}
		if al.Started == nil || al.User != "root" {
			t.Errorf("allocation %s: %+v", key, al)
		}
	}
}

// TestSlurmJobInsideAnAllocation runs `scavctl run` inside a batch job:
// through the node's scavd, the job's attempts are job steps of that
// allocation (no queue between them), the job is tied to the allocation the
// prolog reported, and a move to 1 worker is a new step.
func TestSlurmJobInsideAnAllocation(t *testing.T) {
	needTorch(t)
	state := stateDir(t)
	c := slurmCluster(t, state)
	startSlurmScavd(t, state)
	dir := t.TempDir()
	script := filepath.Join(dir, "job.sh")
	body := fmt.Sprintf("#!/bin/sh\nexec %s --state-dir %s run --name inside --workers 2 --batch-size 32 --env OMP_NUM_THREADS=1 -- %s examples/resumable_cnn.py --steps 800\n",
		scavctlBin, state, pythonBin)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := c.Run(ctx, "sbatch", "--parsable", "--ntasks=2", "--chdir="+repoRoot, "--output="+filepath.Join(dir, "out"), script)
	if err != nil {
		t.Fatalf("sbatch: %v\n%s", err, out)
	}
	alloc := strings.TrimSpace(out)
	var id string
	for deadline := time.Now().Add(60 * time.Second); id == ""; time.Sleep(200 * time.Millisecond) {
		for _, js := range jsonLines[[]api.Job](t, state, "jobs", "-o", "json") {
			for _, j := range js {
				if j.Name == "inside" {
					id = j.ID
				}
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "out"))
			t.Fatalf("no job from inside allocation %s:\n%s", alloc, b)
		}
	}
	awaitAttempt(t, state, id, 1)
	if _, e, code := scavctl(t, state, "move", id, "--workers", "1"); code != 0 {
		t.Fatalf("scavctl move: exit %d\n%s", code, e)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		st, err := c.JobState(ctx, alloc)
		if err == nil && st == "COMPLETED" {
			break
		}
		if time.Now().After(deadline) || (err == nil && st != "RUNNING" && st != "PENDING" && st != "COMPLETING") {
			b, _ := os.ReadFile(filepath.Join(dir, "out"))
			t.Fatalf("allocation %s is %s (%v):\n%s", alloc, st, err, b)
		}
	}
	j := jobRecord(t, state, id)
	a := j.Attempts
	if j.State != api.StateSucceeded || j.Allocation != "slurm."+alloc || len(a) != 2 || a[1].Config.Workers != 1 {
		t.Fatalf("job record %+v: want succeeded in allocation %s after a move to 1 worker", j, alloc)
	}
	for _, at := range a {
		if step, ok := strings.CutPrefix(at.Handle, alloc+"."); !ok || step == "" {
			t.Errorf("attempt %d ran as %q, not as a step of allocation %s", at.Attempt, at.Handle, alloc)
		}
	}
	checkEveryStepOnce(t, steps(t, state, id))
	if al := allocation(t, state, "slurm."+alloc); al.Started == nil || !slices.Contains(al.Jobs, id) {
		t.Errorf("allocation %s: %+v; want reported by the prolog, with job %s", alloc, al, id)
	}
}

// TestSlurmStandaloneInsideAnAllocation runs `scavctl run` inside a batch
// job with no scavd to find: the daemon scavctl starts itself runs the
// workers as a job step of the allocation.
func TestSlurmStandaloneInsideAnAllocation(t *testing.T) {
	state := stateDir(t)
	c := slurmCluster(t, t.TempDir()) // no daemon there: the hooks fail open
	dir := t.TempDir()
	script := filepath.Join(dir, "job.sh")
	body := fmt.Sprintf("#!/bin/sh\nexport SCAV_API=\nexec %s --state-dir %s run --name alone --workers 2 -- /bin/sh -c 'echo \"step $SLURM_STEP_ID rank $RANK of $WORLD_SIZE\"'\n",
		scavctlBin, state)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.Run(ctx, "sbatch", "--parsable", "--ntasks=2", "--output="+filepath.Join(dir, "out"), script)
	if err != nil {
		t.Fatalf("sbatch: %v\n%s", err, out)
	}
	alloc := strings.TrimSpace(out)
	for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if st, err := c.JobState(ctx, alloc); err == nil && st == "COMPLETED" {
			break
		} else if time.Now().After(deadline) || (err == nil && st != "RUNNING" && st != "PENDING" && st != "COMPLETING") {
			b, _ := os.ReadFile(filepath.Join(dir, "out"))
			t.Fatalf("allocation %s is %s (%v):\n%s", alloc, st, err, b)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "out"))
	for r := range 2 {
		if want := fmt.Sprintf("[%d] step 0 rank %d of 2", r, r); !strings.Contains(string(b), want) {
			t.Errorf("output of allocation %s lacks %q:\n%s", alloc, want, b)
		}
	}
	js := jsonLines[[]api.Job](t, state, "jobs", "-o", "json")
	if len(js) != 1 || len(js[0]) != 1 || js[0][0].Launcher != "slurm" || js[0][0].Attempts[0].Handle != alloc+".0" {
		t.Fatalf("jobs %+v: want one, run by the slurm launcher as step %s.0", js, alloc)
	}
}

// TestSlurmJobSurvivesScavd stops scavd under a submitted job, by a crash
// (SIGKILL) and by a restart (SIGTERM: it leaves batch jobs running): the
// batch job goes on, the next scavd reattaches to it, and the job finishes
// in its first attempt with every step recorded once. After the crash the
// next scavd starts at once, on the same API socket, and scavctl run follows
// the job through to its end; after the stop it starts only once scavctl run
// has let go of the lost daemon (exit 75, saying how to attach to the job).
func TestSlurmJobSurvivesScavd(t *testing.T) {
	needTorch(t)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { testSlurmJobSurvivesScavd(t, sig) })
	}
}

func testSlurmJobSurvivesScavd(t *testing.T, sig syscall.Signal) {
	state := stateDir(t)
	slurmCluster(t, state)
	first := startSlurmScavd(t, state)
	cmd, _, errOut := startJob(t, state, "--name", "crash", "--workers", "2", "--batch-size", "32", "--env", "OMP_NUM_THREADS=1",
		"--", pythonBin, "examples/resumable_cnn.py", "--steps", "600")
	id := waitForRecords(t, state, errOut, 2*30)
	_ = first.Process.Signal(sig)
	_ = first.Wait()
	if sig == syscall.SIGTERM {
		// scavctl run, having lost its daemon, says so and lets go.
		if err := cmd.Wait(); cmd.ProcessState.ExitCode() != 75 || !strings.Contains(errOut.String(), "scavctl attach "+id) {
			t.Fatalf("scavctl run after losing scavd: %v, want exit 75 and how to follow the job:\n%s", err, errOut.String())
		}
	}
	startSlurmScavd(t, state)
	var j api.Job
	for deadline := time.Now().Add(2 * time.Minute); !j.State.Done(); time.Sleep(300 * time.Millisecond) {
		if j = jobRecord(t, state, id); time.Now().After(deadline) {
			t.Fatalf("job %s after the restart: %+v", id, j)
		}
	}
	if j.State != api.StateSucceeded || len(j.Attempts) != 1 {
		t.Fatalf("job record %+v: want succeeded in its first attempt, reattached", j)
	}
	if sig == syscall.SIGKILL {
		// scavctl run found the next scavd on the same socket and saw the job end.
		if err := cmd.Wait(); err != nil || !strings.Contains(errOut.String(), "finished: all workers exited 0") {
			t.Fatalf("scavctl run across the restart: %v, want the job's end and exit 0:\n%s", err, errOut.String())
		}
	}
	// Steps written to the socket as scavd went away are lost with it;
	// every other step is there, once per rank.
	seen := map[[2]int64]int{}
	for _, r := range steps(t, state, id) {
		seen[[2]int64{int64(r.Rank), r.Step}]++
	}
	var missing []int64
	for s := int64(1); s <= 600; s++ {
		for rank := int64(0); rank < 2; rank++ {
			if n := seen[[2]int64{rank, s}]; n > 1 {
				t.Errorf("step %d rank %d: %d records", s, rank, n)
			} else if n == 0 && (len(missing) == 0 || missing[len(missing)-1] != s) {
				missing = append(missing, s)
			}
		}
	}
	if len(missing) > 5 {
		t.Errorf("steps without a record: %v; want at most the few in flight at the crash", missing)
	}
	t.Logf("steps lost with the %s scavd: %v", sig, missing)
}
