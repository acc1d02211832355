package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/nsmachine"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/plugins"
)

// TestCloudScavdKilled SIGKILLs scavd while a job runs on two instances,
// and starts it again 10 s later: the instances outlived it, as a cloud's
// do, and so did the workers (their ranks are detached). The next scavd
// reattaches to them (cloudvm's Recoverer): the job goes on in the same
// attempt on the same instances and finishes, every step trained once (the
// records the workers kept while no daemon listened arrive after it), no
// instance is left, and the cost it records is what the instances billed,
// to the cent, and what the launcher's charges say.
func TestCloudScavdKilled(t *testing.T) {
	needCloud(t)
	args := []string{"--cloud-catalog", "testdata/cloud-catalog.json"}
	d := startCloudScavd(t, "", nil, args...)
	cmd, _, errOut := startJob(t, d.state, "--launcher", "cloudvm", "--types", "loc.half", "--workers", "2", "--batch-size", "64",
		"--env", "OMP_NUM_THREADS=1", "--", pythonBin, "examples/resumable_cnn.py", "--steps", "400", "--checkpoint-every", "20")
	id := waitForRecords(t, d.state, errOut, 2*30)
	before := aliveOf(t, d.state, id)
	if len(before) != 2 {
		t.Fatalf("the job runs on %v, want 2 instances", before)
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	const lastBefore = 1 // no policy: the job stays in its first attempt (no scavctl call here: it would start a daemon)
	time.Sleep(10 * time.Second)
	if still := aliveOf(t, d.state, id); !slices.Equal(still, before) {
		t.Fatalf("10 s after scavd's SIGKILL the job's instances are %v, want %v still running", still, before)
	}

	restarted := time.Now()
	d2 := startCloudScavd(t, d.state, nil, args...)
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		j := jobRecord(t, d2.state, id)
		if j.State.Done() {
			t.Logf("the job ended %v after the next scavd started: %s (%s)", time.Since(restarted).Round(100*time.Millisecond), j.State, j.Message)
			break
		}
		// An instance may end between the record's read and this one (the
		// attempt finished and its instances are being released), so fewer
		// instances is no sign; a new one, or a new attempt, is.
		if now := aliveOf(t, d2.state, id); j.Attempt != lastBefore || slices.ContainsFunc(now, func(i string) bool { return !slices.Contains(before, i) }) {
			t.Fatalf("the job moved (attempt %d, was %d) or runs on new instances (%v, were %v): it was not reattached (%s)", j.Attempt, lastBefore, now, before, j.Message)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reattached job did not finish: %s attempt %d (%s)", j.State, j.Attempt, j.Message)
		}
	}
	j := jobRecord(t, d2.state, id)
	if j.State != api.StateSucceeded || len(j.Attempts) != 1 {
		t.Fatalf("job %s: %s with %d attempts (%s); want it succeeded in its one attempt", id, j.State, len(j.Attempts), j.Message)
	}
	if last := checkEveryStepOnce(t, steps(t, d2.state, id)); last != 400 {
		t.Errorf("the job's last step is %d, want 400", last)
	}
	d2.stop(t)
	var recs []localcloud.Record
	rs, err := localcloud.ReadRecords(cloudDir(d.state))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Tags[provider.TagJob] == id {
			recs = append(recs, r)
		}
	}
	if len(recs) != 2 {
		t.Errorf("the job had %d instances, want its 2", len(recs))
	}
	cat, err := localcloud.LoadCatalog("testdata/cloud-catalog.json")
	if err != nil {
		t.Fatal(err)
	}
	usd, tol := billed(t, recs, catalogPrice(cat)) // fails for an instance not ended: none leaked
	if j.Cost == nil || math.Abs(j.Cost.USD-usd) > tol+1e-9 {
		t.Errorf("recorded cost %+v, want $%.6f ± %.6f: the instances' billed seconds at their prices", j.Cost, usd, tol)
	}
	checkChargesAreTheRecord(t, d.state, id)
	destroyCloud(t, cloudDir(d.state))
}

// aliveOf lists the running instances of job, from the local cloud's
// records (its owner may be dead).
func aliveOf(t *testing.T, state, job string) []string {
	t.Helper()
	rs, err := localcloud.ReadRecords(cloudDir(state))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		if r.Tags[provider.TagJob] == job && r.Alive() {
			out = append(out, r.ID)
		}
	}
	slices.Sort(out)
	return out
}

// TestCloudScavdKilledForGood SIGKILLs scavd while a job runs and starts
// no other: the job's instance ends itself once no SSH connection of its
// scavd has been open for --cloud-orphan-timeout (its watchdog), with no
// scavd to reap it.
func TestCloudScavdKilledForGood(t *testing.T) {
	needCloud(t)
	const timeout = 5 * time.Second
	d := startCloudScavd(t, "", nil, "--cloud-catalog", "testdata/cloud-catalog.json", "--cloud-orphan-timeout", timeout.String())
	cmd, _, errOut := startJob(t, d.state, "--launcher", "cloudvm", "--types", "loc.half", "--workers", "1", "--batch-size", "64",
		"--env", "OMP_NUM_THREADS=1", "--", pythonBin, "examples/resumable_cnn.py", "--steps", "100000", "--checkpoint-every", "20")
	id := waitForRecords(t, d.state, errOut, 30)
	before := aliveOf(t, d.state, id)
	if len(before) != 1 {
		t.Fatalf("the job runs on %v, want 1 instance", before)
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	killed := time.Now()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for {
		rs, err := localcloud.ReadRecords(cloudDir(d.state))
		if err != nil {
			t.Fatal(err)
		}
		up := false
		for _, r := range rs {
			up = up || r.Up
		}
		if !up {
			break
		}
		if time.Since(killed) > timeout+20*time.Second {
			t.Fatalf("instance %v still up %v after scavd was killed (orphan timeout %v)", before, time.Since(killed), timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("instance %v ended itself %v after scavd was killed (orphan timeout %v)", before, time.Since(killed).Round(100*time.Millisecond), timeout)
	// scavd --cloud-cleanup destroys the cloud no scavd has open, and ends
	// the charges of its instances when they ended.
	out, err := exec.Command(scavdBinary(t), "--state-dir", d.state, "--launcher", "cloudvm", "--cloud-cleanup").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "destroyed local cloud "+cloudDir(d.state)) {
		t.Fatalf("scavd --cloud-cleanup: %v\n%s", err, out)
	}
	var cl struct {
		ID     string `json:"id"`
		Bridge struct {
			Name string `json:"name"`
		} `json:"bridge"`
	}
	if b, err := os.ReadFile(filepath.Join(cloudDir(d.state), "cloud.json")); err != nil || json.Unmarshal(b, &cl) != nil {
		t.Fatalf("cloud.json: %v", err)
	}
	if nsmachine.LinkExists(cl.Bridge.Name) || nsmachine.CgroupExists("scavenger-"+cl.ID) {
		t.Errorf("bridge %s or cgroup scavenger-%s left after the cleanup", cl.Bridge.Name, cl.ID)
	}
	rs, _ := localcloud.ReadRecords(cloudDir(d.state))
	for _, r := range rs {
		if r.Ended == nil || r.Up {
			t.Errorf("instance %s after the cleanup: %+v", r.ID, r)
		}
	}
	b, err := os.ReadFile(filepath.Join(d.state, "cloud", "launcher", "pools", id, "charges.json"))
	var cs []plugins.Charge
	if err != nil || json.Unmarshal(b, &cs) != nil || len(cs) != 1 || cs[0].End == nil || rs[0].Ended == nil || !cs[0].End.Equal(*rs[0].Ended) {
		t.Errorf("charges after the cleanup: %+v, %v; want the instance's, ended when it did", cs, err)
	}
	_ = os.WriteFile(filepath.Join(cloudDir(d.state), "destroyed"), nil, 0o600)
}
