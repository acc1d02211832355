package main

import (
	"encoding/json"
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

// TestCloudScavdKilled SIGKILLs scavd while a job runs on two instances:
// they outlive it, as a cloud's do. The next scavd on the same state
// directory terminates them (the job was lost with the daemon), records
// what they cost, and resumes the job from its checkpoint on new
// instances; stopping it and the daemon leaves no instance, namespace,
// cgroup or process behind.
func TestCloudScavdKilled(t *testing.T) {
	needCloud(t)
	args := []string{"--cloud-catalog", "testdata/cloud-catalog.json"}
	d := startCloudScavd(t, "", nil, args...)
	cmd, _, errOut := startJob(t, d.state, "--launcher", "cloudvm", "--types", "loc.half", "--workers", "2", "--batch-size", "64",
		"--env", "OMP_NUM_THREADS=1", "--", pythonBin, "examples/resumable_cnn.py", "--steps", "100000", "--checkpoint-every", "20")
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
	if still := aliveOf(t, d.state, id); !slices.Equal(still, before) {
		t.Fatalf("after scavd's SIGKILL the job's instances are %v, want %v still running", still, before)
	}

	killed := time.Now()
	d2 := startCloudScavd(t, d.state, nil, args...)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		j := jobRecord(t, d2.state, id)
		now := aliveOf(t, d2.state, id)
		if !overlaps(now, before) && len(now) == 2 && j.State == api.StateRunning && j.Attempt > 1 {
			t.Logf("%s after the next scavd started: the old instances %v are gone, the job resumed (attempt %d) on %v",
				time.Since(killed).Round(100*time.Millisecond), before, j.Attempt, now)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the next scavd did not terminate %v and resume the job: alive %v, job %s attempt %d (%s)", before, now, j.State, j.Attempt, j.Message)
		}
	}
	j := jobRecord(t, d2.state, id)
	if j.Attempts[0].Cost == nil || j.Attempts[0].Cost.USD <= 0 || len(j.Attempts[0].Cost.Instances) != 2 {
		t.Errorf("the lost attempt's cost %+v: want its two instances billed", j.Attempts[0].Cost)
	}
	if _, e, code := scavctl(t, d2.state, "stop", id); code != 0 {
		t.Fatalf("scavctl stop: %s", e)
	}
	for deadline := time.Now().Add(60 * time.Second); !jobRecord(t, d2.state, id).State.Done(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the resumed job did not stop")
		}
	}
	d2.stop(t)
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

func overlaps(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
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
