package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/internal/cloudemu"
	"github.com/scavenger-ml/scavenger/internal/ec2emu"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud/localcloudtest"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

// TestCloudJobOnEmulatedEC2 is TestCloudJobRechoosesAfterASpotNotice
// through the aws provider: scavd speaks to an EMULATION of EC2 (this
// test serves internal/ec2emu, backed by a local cloud, so that the
// instances RunInstances launches are real machines running the workers)
// with the real AWS SDK. The emulation has no capacity in us-east-1a,
// throttles the first requests and does not find instances right after
// their launch. c6i.xlarge on demand is over the price cap: after the
// spot notice the job must re-choose c6i.large.
func TestCloudJobOnEmulatedEC2(t *testing.T) {
	needCloud(t)
	began := time.Now()
	cat := localcloud.DefaultCatalog() // loc-a and loc-b: us-east-1a and 1b
	back, err := localcloud.Open(context.Background(), localcloud.Options{Logger: zap.NewNop(), Dir: t.TempDir(), Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = back.Destroy(context.Background()) }) // when the test did not get to it
	spot := map[string]map[string]float64{"c6i.large": {"us-east-1a": 0.031, "us-east-1b": 0.029}, "c6i.xlarge": {"us-east-1a": 0.061, "us-east-1b": 0.066}}
	emu, err := ec2emu.New(ec2emu.Options{Backend: localcloudtest.Backend(back), Types: map[string]string{"c6i.large": "loc.half", "c6i.xlarge": "loc.full"},
		Zones: []string{"us-east-1a", "us-east-1b"}, BackendZones: []string{"loc-a", "loc-b"}, SpotPrices: spot})
	if err != nil {
		t.Fatal(err)
	}
	emu.SetFaults(ec2emu.Faults{NoCapacity: []string{"us-east-1a"}, Throttle: 2, NotFoundFor: 300 * time.Millisecond})
	srv := httptest.NewServer(emu)
	defer srv.Close()
	nowhere := filepath.Join(t.TempDir(), "none")
	env := []string{"AWS_ACCESS_KEY_ID=AKIDEMULATED", "AWS_SECRET_ACCESS_KEY=emulated", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=" + nowhere, "AWS_SHARED_CREDENTIALS_FILE=" + nowhere}
	d := startCloudScavd(t, "", env, "--cloud-provider", "aws", "--cloud-region", "us-east-1", "--cloud-zones", "us-east-1a,us-east-1b",
		"--cloud-types", "c6i.large,c6i.xlarge", "--cloud-image", "ami-0emulated", "--cloud-endpoint", srv.URL, "--cloud-metadata", back.Metadata(),
		"--cloud-catalog", "../../launchers/cloudvm/awscloud/testdata/catalog.json")
	jobBegan := time.Now()
	cmd, _, errOut := startJob(t, d.state, cloudJobArgs("c6i.large,c6i.xlarge", 0.1)...)
	alive := func(job string) []string {
		var ids []string
		for _, r := range back.Records() {
			if r.Tags[provider.TagJob] == job && r.Alive() && r.Type == "loc.full" {
				ids = append(ids, r.ID)
			}
		}
		return ids
	}
	id, _ := interruptOnSpot(t, d.state, errOut, "c6i.xlarge", alive, func(inst string) error { return back.Interrupt(inst, 30*time.Second) })
	if err := cmd.Wait(); err != nil {
		t.Fatalf("scavctl run: %v\n%s", err, errOut.String())
	}
	var recs []localcloud.Record
	for _, r := range back.Records() {
		if r.Tags[provider.TagJob] == id {
			recs = append(recs, r)
		}
	}
	// The emulated instances are the backend's with EC2's types and zones.
	ec2 := map[string]cloudemu.Instance{}
	for _, in := range emu.Instances() {
		ec2[in.ID] = in
	}
	for i, r := range recs {
		if e, ok := ec2[r.ID]; ok {
			recs[i].Type, recs[i].Zone = e.Type, e.Zone
		}
		if recs[i].Zone != "us-east-1b" {
			t.Errorf("instance %s in %s: the emulation had no capacity there", r.ID, recs[i].Zone)
		}
	}
	od := map[string]float64{"c6i.large": 0.085, "c6i.xlarge": 0.17}
	usd, tol := billed(t, recs, func(r localcloud.Record) float64 {
		if r.Market == provider.Spot {
			return spot[r.Type][r.Zone]
		}
		return od[r.Type]
	})
	checkRechosen(t, d.state, id, "c6i.xlarge", recs, usd, tol)
	if n := emu.Calls("RunInstances"); n < 3 {
		t.Errorf("%d RunInstances calls: the capacity error and the throttling were not met", n)
	}
	d.stop(t)
	if err := back.Destroy(context.Background()); err != nil {
		t.Error(err)
	}
	if left := back.Leftovers(); len(left) > 0 {
		t.Errorf("left: %v", left)
	}
	destroyCloudIfAny(t, cloudDir(d.state))
	t.Logf("end to end in %s (the job: %s)", time.Since(began).Round(time.Second), time.Since(jobBegan).Round(time.Second))
}

// destroyCloudIfAny checks a scavd's own local cloud only when it made one
// (the aws provider makes none).
func destroyCloudIfAny(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); err == nil {
		destroyCloud(t, dir)
	}
}
