package main

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// cloudJobArgs is the job of the cloud end-to-end tests: the resumable CNN
// with 1 or 2 workers and a batch range, over two types on spot within a
// price cap, optimised for time. With the cap, the dearer type is worth
// it only on spot: once its spot market is gone, the job must re-choose.
func cloudJobArgs(types string, maxPrice float64) []string {
	return []string{"--launcher", "cloudvm", "--types", types, "--spot", "--max-price", strconv.FormatFloat(maxPrice, 'f', -1, 64),
		"--workers", "1:2", "--batch-size", "32:128", "--policy", "adaptive", "--objective", "time", "--target-steps", "2500",
		"--env", "OMP_NUM_THREADS=1", "--grace", "20s", "--", pythonBin, "examples/resumable_cnn.py"}
}

// jobStatus reads a job's record and its latest step through `scavctl status -o json`.
func jobStatus(t *testing.T, state, id string) (api.Job, telemetry.StepRecord) {
	t.Helper()
	var st struct {
		Job      api.Job              `json:"job"`
		LastStep telemetry.StepRecord `json:"last_step"`
	}
	out, e, _ := scavctl(t, state, "status", id, "-o", "json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status %s: %v\n%s%s", id, err, out, e)
	}
	return st.Job, st.LastStep
}

// interruptOnSpot waits until job runs steps on spot instances of typ and
// interrupts one of them (interrupt), trying again should the job have
// moved away meanwhile; it returns the job's id and the instance.
func interruptOnSpot(t *testing.T, state string, errOut interface{ String() string }, typ string, alive func(job string) []string,
	interrupt func(id string) error) (job, victim string) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the job never ran on spot %s:\n%s", typ, errOut.String())
		}
		m := jobIDRe.FindStringSubmatch(errOut.String())
		if m == nil {
			continue
		}
		j, last := jobStatus(t, state, m[1])
		if j.State.Done() {
			t.Fatalf("the job ended before its spot notice: %s\n%s", j.Message, errOut.String())
		}
		k := len(j.Attempts)
		if k == 0 || j.Attempts[k-1].Ended != nil || last.Attempt != j.Attempts[k-1].Attempt {
			continue
		}
		if c := j.Attempts[k-1].Config; c.MachineType != typ || c.Market != plugins.MarketSpot {
			continue
		}
		for _, id := range alive(j.ID) {
			if err := interrupt(id); err == nil {
				return j.ID, id
			}
		}
	}
}

// checkRechosen checks the record of a job that got a spot notice on typ:
// it succeeded, every step ran once, the attempt on typ ended for the
// notice and the next runs on another type after a recorded re-choice,
// and the cost it records is what its instances (recs) billed.
func checkRechosen(t *testing.T, state, id, typ string, recs []localcloud.Record, usd, tol float64) {
	t.Helper()
	j := jobRecord(t, state, id)
	if j.State != api.StateSucceeded {
		t.Fatalf("job %s: %s (%s)", id, j.State, j.Message)
	}
	if last := checkEveryStepOnce(t, steps(t, state, id)); last < 100 {
		t.Errorf("job ran %d steps", last)
	}
	var preempted int
	for k, a := range j.Attempts {
		if strings.Contains(a.EndReason, "pre-empted") {
			preempted = k + 1
		}
	}
	if preempted == 0 || preempted == len(j.Attempts) || j.Attempts[preempted-1].Config.MachineType != typ {
		t.Fatalf("no attempt on %s ended for the notice and was followed by another: %+v", typ, j.Attempts)
	}
	next := j.Attempts[preempted].Config
	if next.MachineType == typ {
		t.Errorf("after the notice the job went on on %s again (%+v): not re-chosen", typ, next)
	}
	var rechosen bool
	for _, d := range j.Decisions {
		rechosen = rechosen || strings.Contains(d.Reason, "re-chosen") && d.To == next
	}
	if !rechosen {
		t.Errorf("no recorded re-choice of %+v among %+v", next, j.Decisions)
	}
	if j.Cost == nil || math.Abs(j.Cost.USD-usd) > tol+1e-9 {
		t.Errorf("recorded cost %+v, want $%.6f ± %.6f: the instances' billed seconds at their prices", j.Cost, usd, tol)
		for _, r := range recs {
			t.Logf("instance %s %s %s %s: %s to %v", r.ID, r.Type, r.Zone, r.Market, r.Launched, r.Ended)
		}
		for _, a := range j.Attempts {
			if a.Cost != nil {
				t.Logf("attempt %d: %+v", a.Attempt, a.Cost.Instances)
			}
		}
	}
	var sum float64
	for _, a := range j.Attempts {
		if a.Cost != nil {
			sum += a.Cost.USD
		}
	}
	if j.Cost != nil && math.Abs(sum-j.Cost.USD) > 1e-9 {
		t.Errorf("the attempts' costs add up to $%g, the job's is $%g", sum, j.Cost.USD)
	}
	var alive []string
	for _, r := range recs {
		if r.Alive() {
			alive = append(alive, r.ID)
		}
	}
	if len(alive) > 0 {
		t.Errorf("instances of the finished job still run: %v", alive)
	}
	checkChargesAreTheRecord(t, state, id)
	t.Logf("job %s: %d attempts, %d instances, $%.6f billed; attempt %d on %s pre-empted, then %s",
		id, len(j.Attempts), len(recs), j.Cost.USD, preempted, typ, workersText(next))
}

// workersText is how the test logs a configuration.
func workersText(c plugins.Config) string {
	return strconv.Itoa(c.Workers) + " x " + c.MachineType + " (" + c.Market + "), batch " + strconv.Itoa(c.GlobalBatch)
}

// TestCloudJobRechoosesAfterASpotNotice runs the job on the local cloud
// (one zone): the optimizer chooses; a spot notice arrives for one of the
// job's loc.full instances mid-run; the job checkpoints, the instance is
// gone, the job resumes on the configuration the optimizer re-chose (loc.full
// on demand is over the price cap) and finishes. Every step once, the
// recorded cost is the instances' bill, nothing is left.
func TestCloudJobRechoosesAfterASpotNotice(t *testing.T) {
	needCloud(t)
	began := time.Now()
	d := startCloudScavd(t, "", nil, "--cloud-catalog", "testdata/cloud-catalog.json")
	jobBegan := time.Now()
	cmd, _, errOut := startJob(t, d.state, cloudJobArgs("loc.half,loc.full", 0.1)...)
	alive := func(job string) []string {
		var ids []string
		for _, r := range cloudRecords(t, d.state, job) {
			if r.Alive() && r.Type == "loc.full" {
				ids = append(ids, r.ID)
			}
		}
		return ids
	}
	noticed := time.Now()
	id, victim := interruptOnSpot(t, d.state, errOut, "loc.full", alive, func(inst string) error {
		noticed = time.Now()
		return localcloud.InterruptVia(context.Background(), cloudDirSock(d.state), inst, 30*time.Second)
	})
	if err := cmd.Wait(); err != nil {
		t.Fatalf("scavctl run: %v\n%s", err, errOut.String())
	}
	recs := cloudRecords(t, d.state, id)
	for _, r := range recs {
		if r.ID == victim && (r.Ended == nil || r.Ended.Sub(noticed) > 30*time.Second) {
			t.Errorf("the reclaimed instance %s ended at %v, not within its notice", victim, r.Ended)
		}
	}
	cat, err := localcloud.LoadCatalog("testdata/cloud-catalog.json")
	if err != nil {
		t.Fatal(err)
	}
	usd, tol := billed(t, recs, catalogPrice(cat))
	checkRechosen(t, d.state, id, "loc.full", recs, usd, tol)
	d.stop(t)
	destroyCloud(t, cloudDir(d.state))
	t.Logf("end to end in %s (the job: %s)", time.Since(began).Round(time.Second), time.Since(jobBegan).Round(time.Second))
}

func cloudDirSock(state string) string { return cloudDir(state) + "/admin.sock" }

// TestCloudBudgetHolds runs a time-objective job with --budget $0.002 on
// a loc.half on demand ($0.10/h: the budget buys 72 s): once its machine
// has cost the budget, the job checkpoints and stops (exit 143), its
// message naming the budget and the spend, and it is billed the budget and
// the checkpoint's seconds, not several times the budget.
func TestCloudBudgetHolds(t *testing.T) {
	needCloud(t)
	const budget = 0.002
	d := startCloudScavd(t, "", nil, "--cloud-catalog", "testdata/cloud-catalog.json")
	cmd, _, errOut := startJob(t, d.state, "--launcher", "cloudvm", "--types", "loc.half", "--workers", "1", "--batch-size", "64",
		"--policy", "adaptive", "--objective", "time", "--budget", strconv.FormatFloat(budget, 'f', -1, 64), "--target-steps", "1000000",
		"--env", "OMP_NUM_THREADS=1", "--grace", "20s", "--", pythonBin, "examples/resumable_cnn.py", "--checkpoint-every", "50")
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Fatalf("scavctl run: %v, want exit 143\n%s", err, errOut.String())
	}
	id := jobID(t, errOut.String())
	j := jobRecord(t, d.state, id)
	if j.State != api.StateStopped || !strings.Contains(j.Message, "the budget of $0.002 is spent ($0.00") || !strings.Contains(j.Message, "after checkpointing step") {
		t.Errorf("job %s: %s: %q; want stopped at the budget after a checkpoint", id, j.State, j.Message)
	}
	// Billed: the minute's minimum at least ($0.00167), else the budget and
	// what the checkpoint and the release took.
	if j.Cost == nil || j.Cost.USD > budget*1.15 {
		t.Errorf("job %s cost %+v: the budget was $%g", id, j.Cost, budget)
	}
	checkChargesAreTheRecord(t, d.state, id)
	t.Logf("job %s: %s; billed $%.6f for a budget of $%g", id, j.Message, j.Cost.USD, budget)
	d.stop(t)
	destroyCloud(t, cloudDir(d.state))
}

// TestCloudPlanAndPricesAskTheDaemon: scavctl plan --launcher cloudvm is a
// dry run over the running scavd's offers — the candidates a job with
// these bounds would choose among and what each would pay, before any
// instance exists — and prices --live --provider local shows that scavd's
// catalog, not the built-in one.
func TestCloudPlanAndPricesAskTheDaemon(t *testing.T) {
	needCloud(t)
	b, err := os.ReadFile("testdata/cloud-catalog.json")
	if err != nil {
		t.Fatal(err)
	}
	cat := filepath.Join(t.TempDir(), "catalog.json") // loc.half's spot at $0.05, not the built-in $0.04
	if err := os.WriteFile(cat, []byte(strings.Replace(string(b), `"usd_per_hour": 0.04,`, `"usd_per_hour": 0.05,`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startCloudScavd(t, "", nil, "--cloud-catalog", cat)
	out, errOut, code := scavctl(t, d.state, "plan", "--launcher", "cloudvm", "--types", "loc.half,loc.full", "--spot", "--workers", "1:2", "--batch-size", "32:64", "-o", "json")
	if code != 0 {
		t.Fatalf("plan: exit %d\n%s", code, errOut)
	}
	var plan struct {
		Candidates []cloudPlanRow `json:"candidates"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, out)
	}
	if n := len(plan.Candidates); n != 8 {
		t.Errorf("%d candidates, want 8 (2 types x 1:2 workers x batches 32, 64)", n)
	}
	if c := plan.Candidates[0]; c.Type != "loc.half" || c.Market != "spot" || c.Machines != 1 || math.Abs(c.USDHour-0.05) > 1e-9 || math.Abs(c.MinBill-0.05/60) > 1e-9 {
		t.Errorf("cheapest candidate %+v, want 1 loc.half on spot at the daemon's $0.05/h, a minute's minimum", c)
	}
	if rs, _ := localcloud.ReadRecords(cloudDir(d.state)); len(rs) != 0 {
		t.Errorf("the dry run bought instances: %+v", rs)
	}
	out, errOut, code = scavctl(t, d.state, "prices", "--live", "--provider", "local")
	if code != 0 || !strings.Contains(out, "loc.half") || !strings.Contains(out, "0.0500") {
		t.Errorf("prices --live --provider local: exit %d\n%s%s\nwant the daemon's loc.half spot price, 0.0500", code, out, errOut)
	}
	d.stop(t)
	destroyCloud(t, cloudDir(d.state))
}
