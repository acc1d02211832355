package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"go.uber.org/zap"
	"google.golang.org/api/option"

	"github.com/scavenger-ml/scavenger/internal/ec2emu"
	"github.com/scavenger-ml/scavenger/internal/gceemu"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/awscloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/gcecloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud/localcloudtest"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/optimizer/price"
)

// site is a cloud a scavd of the bench buys from: the flags and
// environment that point scavd at it, its two types (the cheaper first),
// an in-process provider for it, and how a job's spot instance is found
// and interrupted there.
type site struct {
	name      string
	state     string // its scavd's state directory
	args, env []string
	types     [2]string
	prov      provider.Provider
	// records lists the instances of job: their backend ids (what
	// interrupt takes), zones and markets, and whether they run.
	records   func(ctx context.Context, job string) ([]localcloud.Record, error)
	interrupt func(ctx context.Context, id string, notice time.Duration) error
	close     func()
}

// localSite is scavd's own local cloud (in its state directory), with the
// bench's catalog; prov is a local cloud of the bench's own.
func (b *bench) localSite(ctx context.Context, state string, back *localcloud.Cloud) site {
	sock := filepath.Join(state, "cloud", "localcloud", "admin.sock")
	return site{name: "local", state: state, args: []string{"--cloud-catalog", b.catalog}, types: [2]string{"loc.half", "loc.full"}, prov: back,
		records: func(ctx context.Context, job string) ([]localcloud.Record, error) {
			rs, err := localcloud.RecordsVia(ctx, sock)
			return slices.DeleteFunc(rs, func(r localcloud.Record) bool { return r.Tags[provider.TagJob] != job }), err
		},
		interrupt: func(ctx context.Context, id string, notice time.Duration) error {
			return localcloud.InterruptVia(ctx, sock, id, notice)
		},
		close: func() {}}
}

// emulatedRecords lists back's instances whose tag (or label) key is job.
func emulatedRecords(back *localcloud.Cloud, key string) func(ctx context.Context, job string) ([]localcloud.Record, error) {
	return func(_ context.Context, job string) ([]localcloud.Record, error) {
		return slices.DeleteFunc(back.Records(), func(r localcloud.Record) bool { return r.Tags[key] != job }), nil
	}
}

// interruptOn interrupts an instance of back.
func interruptOn(back *localcloud.Cloud) func(ctx context.Context, id string, notice time.Duration) error {
	return func(_ context.Context, id string, notice time.Duration) error { return back.Interrupt(id, notice) }
}

// awsSite serves the EC2 emulation over back (us-east-1a, b, c on loc-a,
// b, c; c6i.large is loc.half, c6i.xlarge loc.full), with static
// credentials.
func (b *bench) awsSite(ctx context.Context, back *localcloud.Cloud) (site, error) {
	zones := []string{"us-east-1a", "us-east-1b", "us-east-1c"}
	spot := map[string]map[string]float64{"c6i.large": {}, "c6i.xlarge": {}}
	for i, z := range zones { // spot prices that differ by zone, as EC2's do
		spot["c6i.large"][z], spot["c6i.xlarge"][z] = 0.031+0.001*float64(i), 0.061+0.002*float64(i)
	}
	emu, err := ec2emu.New(ec2emu.Options{Backend: localcloudtest.Backend(back), Types: map[string]string{"c6i.large": "loc.half", "c6i.xlarge": "loc.full"},
		Zones: zones, BackendZones: []string{"loc-a", "loc-b", "loc-c"}, SpotPrices: spot})
	if err != nil {
		return site{}, err
	}
	srv := httptest.NewServer(emu)
	catFile, err := filepath.Abs("launchers/cloudvm/awscloud/testdata/catalog.json")
	if err != nil {
		return site{}, err
	}
	cat, err := price.LoadFile(catFile)
	if err != nil {
		srv.Close()
		return site{}, err
	}
	prov, err := awscloud.New(ctx, awscloud.Options{Logger: zap.NewNop(), Region: "us-east-1", Zones: zones, Types: []string{"c6i.large", "c6i.xlarge"},
		Catalog: cat, Image: "ami-0emulated", Endpoint: srv.URL, Metadata: back.Metadata(), WaitPoll: 50 * time.Millisecond,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEMULATED", "emulated", "")})
	if err != nil {
		srv.Close()
		return site{}, err
	}
	nowhere := filepath.Join(b.state, "no-aws-config")
	return site{name: "aws (EC2 emulation)", state: filepath.Join(b.state, "site-aws"), types: [2]string{"c6i.large", "c6i.xlarge"}, prov: prov,
		args: []string{"--cloud-provider", "aws", "--cloud-region", "us-east-1", "--cloud-zones", "us-east-1a,us-east-1b,us-east-1c",
			"--cloud-types", "c6i.large,c6i.xlarge", "--cloud-image", "ami-0emulated", "--cloud-endpoint", srv.URL, "--cloud-metadata", back.Metadata(),
			"--cloud-catalog", catFile},
		env: []string{"AWS_ACCESS_KEY_ID=AKIDEMULATED", "AWS_SECRET_ACCESS_KEY=emulated", "AWS_EC2_METADATA_DISABLED=true",
			"AWS_CONFIG_FILE=" + nowhere, "AWS_SHARED_CREDENTIALS_FILE=" + nowhere},
		records: emulatedRecords(back, provider.TagJob), interrupt: interruptOn(back), close: srv.Close}, nil
}

// gceSite serves the Compute Engine emulation over back (us-central1-a,
// b, c on loc-a, b, c; e2-standard-2 is loc.half, e2-standard-4 loc.full);
// scavd authenticates with a service account key (Application Default
// Credentials), whose token endpoint is the emulation's.
func (b *bench) gceSite(ctx context.Context, back *localcloud.Cloud) (site, error) {
	emu, err := gceemu.New(gceemu.Options{Backend: localcloudtest.Backend(back), Project: "scav-bench",
		Types: map[string]string{"e2-standard-2": "loc.half", "e2-standard-4": "loc.full"},
		Zones: []string{"us-central1-a", "us-central1-b", "us-central1-c"}, BackendZones: []string{"loc-a", "loc-b", "loc-c"}})
	if err != nil {
		return site{}, err
	}
	srv := httptest.NewServer(emu)
	key, err := gceemu.ServiceAccountKey(srv.URL, "scav-bench")
	if err == nil {
		err = os.WriteFile(filepath.Join(b.state, "gce-key.json"), key, 0o600)
	}
	catFile, aerr := filepath.Abs("launchers/cloudvm/gcecloud/testdata/catalog.json")
	cat, cerr := price.LoadFile(catFile)
	if err = firstErr(err, aerr, cerr); err != nil {
		srv.Close()
		return site{}, err
	}
	zones := []string{"us-central1-a", "us-central1-b", "us-central1-c"}
	prov, err := gcecloud.New(ctx, gcecloud.Options{Logger: zap.NewNop(), Project: "scav-bench", Zones: zones, Types: []string{"e2-standard-2", "e2-standard-4"},
		Catalog: cat, Image: "projects/debian-cloud/global/images/family/debian-12", Endpoint: srv.URL + "/compute/v1/", Metadata: back.Metadata(),
		ClientOptions: []option.ClientOption{option.WithoutAuthentication()}, Poll: 50 * time.Millisecond})
	if err != nil {
		srv.Close()
		return site{}, err
	}
	return site{name: "gce (Compute Engine emulation)", state: filepath.Join(b.state, "site-gce"), types: [2]string{"e2-standard-2", "e2-standard-4"}, prov: prov,
		args: []string{"--cloud-provider", "gce", "--cloud-project", "scav-bench", "--cloud-zones", "us-central1-a,us-central1-b,us-central1-c",
			"--cloud-types", "e2-standard-2,e2-standard-4", "--cloud-image", "projects/debian-cloud/global/images/family/debian-12",
			"--cloud-endpoint", srv.URL + "/compute/v1/", "--cloud-metadata", back.Metadata(), "--cloud-catalog", catFile},
		env:     []string{"GOOGLE_APPLICATION_CREDENTIALS=" + filepath.Join(b.state, "gce-key.json")},
		records: emulatedRecords(back, "scavenger-job"), interrupt: interruptOn(back), close: srv.Close}, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// provisionToSSH times n instances of typ in zone of provider p, one at a
// time, from the provisioning request to their sshd answering (through
// the provider: the API, its waits, the machine's boot), and terminates them.
func provisionToSSH(ctx context.Context, p provider.Provider, typ, zone string, n int) ([]float64, error) {
	keys, err := provider.NewKeys()
	if err != nil {
		return nil, err
	}
	var out []float64
	for i := range n {
		t0 := time.Now()
		insts, err := p.Provision(ctx, provider.ProvisionRequest{Type: typ, Count: 1, Market: provider.OnDemand, Zone: zone,
			Tags: map[string]string{provider.TagOwner: "benchcloud"}, Token: fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i), Boot: keys.Boot})
		if err != nil {
			return nil, err
		}
		if _, err := p.WaitReady(ctx, []string{insts[0].ID}); err != nil { // every provider's waits for sshd
			return nil, err
		}
		out = append(out, time.Since(t0).Seconds())
		if err := p.Terminate(ctx, []string{insts[0].ID}); err != nil {
			return nil, err
		}
	}
	return out, nil
}
