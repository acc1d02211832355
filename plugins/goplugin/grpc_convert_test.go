package goplugin

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/plugins"
)

// TestResultRoundTrip checks that every field of a Result crosses the wire.
func TestResultRoundTrip(t *testing.T) {
	in := plugins.Result{ExitCode: 255, FailedRank: 1, Stopped: true, LostHosts: []string{"10.77.0.12"},
		Ranks: []plugins.RankResult{{Rank: 0, PID: 10, ExitCode: 143, Signal: "SIGTERM", Stopped: true}, {Rank: 1, PID: 11, ExitCode: 255}}}
	if got := resultFromProto(resultToProto(in)); !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, in)
	}
}

// TestCloudFieldsRoundTrip checks that a Config's market and the offers of
// Capabilities cross the wire.
func TestCloudFieldsRoundTrip(t *testing.T) {
	spec := plugins.AttemptSpec{JobID: "j", Attempt: 2, Config: plugins.Config{Workers: 2, GlobalBatch: 64, MachineType: "loc.full", Market: plugins.MarketSpot, Nodes: 2, LRScale: 1}}
	if got, _ := specFromProto(specToProto(spec)); !reflect.DeepEqual(got.Config, spec.Config) {
		t.Errorf("config round trip:\n got %+v\nwant %+v", got.Config, spec.Config)
	}
	offers := []plugins.Offer{{Type: "loc.half", Slots: 1, OnDemandUSD: 0.1, SpotUSD: 0.03, MinimumBillS: 60}, {Type: "loc.full", Slots: 2, OnDemandUSD: 0.2}}
	if got := offersFromProto(offersToProto(offers)); !reflect.DeepEqual(got, offers) {
		t.Errorf("offers round trip:\n got %+v\nwant %+v", got, offers)
	}
}

// TestChargeBilled checks the billing rules: granularity rounds up, the
// minimum applies, and the cost follows the hourly price.
func TestChargeBilled(t *testing.T) {
	c := plugins.Charge{USDPerHour: 3.6, Granularity: time.Second, Minimum: time.Minute}
	for _, tt := range []struct{ used, billed float64 }{{0, 60}, {12.2, 60}, {60, 60}, {60.2, 61}, {125, 125}} {
		if got := c.Billed(tt.used); got != tt.billed {
			t.Errorf("Billed(%g) = %g, want %g", tt.used, got, tt.billed)
		}
	}
	if got := c.USD(100); math.Abs(got-0.1) > 1e-12 {
		t.Errorf("USD(100) = %g, want 0.1", got)
	}
	start := time.Unix(1000, 0)
	end := start.Add(90 * time.Second)
	c.Start, c.End = start, &end
	if got := c.Seconds(start.Add(time.Hour)); got != 90 {
		t.Errorf("Seconds of an ended machine = %g, want 90", got)
	}
}
