package awscloud

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/internal/ec2emu"
	"github.com/scavenger-ml/scavenger/internal/nsmachine"
	"github.com/scavenger-ml/scavenger/internal/subreaper"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/optimizer/price"
)

// The tests run the provider, with the real SDK, against the EC2 emulation
// (internal/ec2emu) whose instances are the local cloud's machines.

var (
	cloudOnce sync.Once
	cloud     *localcloud.Cloud
	cloudErr  error
	cloudDir  string
)

// backend is the local cloud the tests share.
func backend(t *testing.T) *localcloud.Cloud {
	t.Helper()
	if err := nsmachine.Check(true); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	cloudOnce.Do(func() {
		if cloudErr = subreaper.Become(); cloudErr != nil {
			return
		}
		if cloudDir, cloudErr = os.MkdirTemp("", "awscloud-test-"); cloudErr != nil {
			return
		}
		cloud, cloudErr = localcloud.Open(context.Background(), localcloud.Options{Logger: zap.NewNop(), Dir: cloudDir})
	})
	if cloudErr != nil {
		t.Fatal(cloudErr)
	}
	return cloud
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cloud != nil {
		if err := cloud.Destroy(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "destroy the local cloud:", err)
			code = 1
		}
		if left := cloud.Leftovers(); len(left) > 0 {
			fmt.Fprintln(os.Stderr, "left of the local cloud:", left)
			code = 1
		}
		_ = os.RemoveAll(cloudDir)
	}
	if kids := subreaper.Settle(5 * time.Second); len(kids) > 0 && code == 0 {
		fmt.Fprintln(os.Stderr, "processes left behind:", kids)
		code = 1
	}
	os.Exit(code)
}

// emulated is an emulated EC2 region and a provider pointed at it.
type emulated struct {
	emu  *ec2emu.Emulator
	prov *Provider
	back *localcloud.Cloud
}

// emulate serves an emulated us-east-1 (zones a and b on the local cloud's
// loc-a and loc-b; c6i.large is loc.half and c6i.xlarge loc.full) and makes
// a provider for it with static credentials.
func emulate(t *testing.T) emulated {
	t.Helper()
	back := backend(t)
	emu, err := ec2emu.New(ec2emu.Options{Backend: back, Types: map[string]string{"c6i.large": "loc.half", "c6i.xlarge": "loc.full"},
		Zones: []string{"us-east-1a", "us-east-1b"}, BackendZones: []string{"loc-a", "loc-b"},
		SpotPrices: map[string]map[string]float64{"c6i.large": {"us-east-1a": 0.031, "us-east-1b": 0.029}, "c6i.xlarge": {"us-east-1a": 0.061, "us-east-1b": 0.066}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
	t.Cleanup(srv.Close)
	cat, err := price.LoadFile("testdata/catalog.json")
	if err != nil {
		t.Fatal(err)
	}
	prov, err := New(context.Background(), Options{Logger: zaptest.NewLogger(t), Region: "us-east-1", Zones: []string{"us-east-1a", "us-east-1b"},
		Types: []string{"c6i.large", "c6i.xlarge"}, Catalog: cat, Image: "ami-0emulated", Endpoint: srv.URL, Metadata: back.Metadata(),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEMULATED", "secret", ""), WaitPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return emulated{emu: emu, prov: prov, back: back}
}
