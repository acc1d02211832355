package main

import (
	"context"
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
	"github.com/scavenger-ml/scavenger/internal/subreaper"
	"github.com/scavenger-ml/scavenger/internal/syncbuf"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/optimizer/price"
	"github.com/scavenger-ml/scavenger/plugins"
	"go.uber.org/zap"
)

// End-to-end tests of the cloudvm launcher: a scavd process whose launcher
// is cloudvm, real namespace instances with real sshd and PyTorch workers.

// cloudScavd is a scavd whose launcher is cloudvm.
type cloudScavd struct {
	state string
	cmd   *exec.Cmd
	log   *syncbuf.Buffer
}

// needCloud skips a test that cannot make namespace instances here.
func needCloud(t *testing.T) {
	t.Helper()
	needTorch(t)
	if err := nsmachine.Check(true); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	if err := subreaper.Become(); err != nil {
		t.Fatal(err)
	}
}

// startCloudScavd starts scavd with the cloudvm launcher on state (a new
// state directory when empty) with args added, and waits until it serves.
func startCloudScavd(t *testing.T, state string, env []string, args ...string) *cloudScavd {
	t.Helper()
	if state == "" {
		state = stateDir(t)
	}
	all := append([]string{"--state-dir", state, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--node-sample-every", "0",
		"--launcher", "cloudvm", "--cloud-notice-interval", "200ms"}, args...)
	d := &cloudScavd{state: state, cmd: exec.Command(scavdBinary(t), all...), log: &syncbuf.Buffer{}}
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	_ = os.Remove(filepath.Join(state, "scavd.json"))
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.stop(t)
		if t.Failed() {
			t.Logf("scavd:\n%s", d.log.String())
		}
		destroyCloudIfAny(t, cloudDir(state)) // when the test did not get to it
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := api.ReadDiscovery(state); err == nil {
			return d
		}
		if d.cmd.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("scavd did not start:\n%s", d.log.String())
		}
	}
}

// stop stops scavd with SIGTERM (it releases its instances) and waits.
func (d *cloudScavd) stop(t *testing.T) {
	if d.cmd.ProcessState == nil {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	}
}

// cloudDir is the local cloud's state directory of a scavd on state.
func cloudDir(state string) string { return filepath.Join(state, "cloud", "localcloud") }

// destroyCloud opens the local cloud of state once its scavd is gone,
// destroys it and checks that nothing of it is left: no instance running,
// no namespace, link, cgroup or process of one, no zombie.
func destroyCloud(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "destroyed")); err == nil {
		return
	}
	defer os.WriteFile(filepath.Join(dir, "destroyed"), nil, 0o600)
	recs, err := localcloud.ReadRecords(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Alive() {
			t.Errorf("instance %s (job %s) is still %s after scavd stopped", r.ID, r.Tags[provider.TagJob], r.State)
		}
	}
	c, err := localcloud.Open(context.Background(), localcloud.Options{Logger: zap.NewNop(), Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Destroy(context.Background()); err != nil {
		t.Error(err)
	}
	if left := c.Leftovers(); len(left) > 0 {
		t.Errorf("left of the instances: %v", left)
	}
	time.Sleep(100 * time.Millisecond)
	subreaper.ReapOrphans()
	for _, kid := range subreaper.Children() {
		if !strings.Contains(kid, "(scavctl)") && !strings.Contains(kid, "(scavd)") {
			t.Errorf("process left: %s", kid)
		}
	}
}

// cloudRecords lists the local cloud's instances of job, through its admin socket.
func cloudRecords(t *testing.T, state, job string) []localcloud.Record {
	t.Helper()
	rs, err := localcloud.RecordsVia(context.Background(), filepath.Join(cloudDir(state), "admin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	var out []localcloud.Record
	for _, r := range rs {
		if r.Tags[provider.TagJob] == job {
			out = append(out, r)
		}
	}
	return out
}

// billed is what the instances rs cost at their prices: per second, a
// minute at least; tol allows a second each (the launcher ends a charge as
// it asks for the termination, the cloud when the machine is gone).
func billed(t *testing.T, rs []localcloud.Record, price func(localcloud.Record) float64) (usd, tol float64) {
	t.Helper()
	for _, r := range rs {
		if r.Ended == nil {
			t.Fatalf("instance %s has not ended", r.ID)
		}
		p := price(r)
		s := math.Max(math.Ceil(r.Ended.Sub(r.Launched).Seconds()-1e-9), 60)
		usd += s / 3600 * p
		tol += 1.0 / 3600 * p
	}
	return usd, tol
}

// checkChargesAreTheRecord checks that the ended job's record bills what
// the launcher's charges of it (charges.json) do: every instance it caused,
// failed starts included, each ended, at the prices in effect.
func checkChargesAreTheRecord(t *testing.T, state, job string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(state, "cloud", "launcher", "pools", job, "charges.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cs []plugins.Charge
	if err := json.Unmarshal(b, &cs); err != nil {
		t.Fatal(err)
	}
	j := jobRecord(t, state, job)
	var usd float64
	var charged, recorded []string
	for _, c := range cs {
		if c.End == nil {
			t.Errorf("charge of %s has not ended after the job did", c.Instance)
		}
		usd += c.CostUSD(time.Now())
		charged = append(charged, c.Instance)
	}
	if j.Cost == nil {
		t.Fatalf("job %s records no cost; its charges bill $%.6f", job, usd)
	}
	for _, in := range j.Cost.Instances {
		recorded = append(recorded, in.ID)
	}
	slices.Sort(charged)
	slices.Sort(recorded)
	if recorded = slices.Compact(recorded); !slices.Equal(charged, recorded) || math.Abs(j.Cost.USD-usd) > 1e-9 {
		t.Errorf("job %s records $%.9f for %v; charges.json bills $%.9f for %v", job, j.Cost.USD, recorded, usd, charged)
	}
}

// catalogPrice prices an instance of a local cloud at its catalog's prices.
func catalogPrice(cat *price.Catalog) func(localcloud.Record) float64 {
	return func(r localcloud.Record) float64 {
		for _, ty := range cat.Types {
			if ty.Name == r.Type {
				usd, _ := ty.Hourly(r.Market == provider.Spot)
				return usd
			}
		}
		return 0
	}
}
