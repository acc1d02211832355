package awscloud

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/internal/ec2emu"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud/localcloudtest"
	"github.com/scavenger-ml/scavenger/optimizer/price"
)

// The tests run the provider, with the real SDK, against the EC2 emulation
// (internal/ec2emu) whose instances are the local cloud's machines.

// shared is the local cloud the tests share.
var shared localcloudtest.Shared

// backend is the shared local cloud.
func backend(t *testing.T) *localcloud.Cloud { return shared.Get(t) }

func TestMain(m *testing.M) { shared.Main(m) }

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
	emu, err := ec2emu.New(ec2emu.Options{Backend: localcloudtest.Backend(back), Types: map[string]string{"c6i.large": "loc.half", "c6i.xlarge": "loc.full"},
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
