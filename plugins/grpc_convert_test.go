package plugins

import (
	"reflect"
	"testing"
)

// TestResultRoundTrip checks that every field of a Result crosses the wire.
func TestResultRoundTrip(t *testing.T) {
	in := Result{ExitCode: 255, FailedRank: 1, Stopped: true, LostHosts: []string{"10.77.0.12"},
		Ranks: []RankResult{{Rank: 0, PID: 10, ExitCode: 143, Signal: "SIGTERM", Stopped: true}, {Rank: 1, PID: 11, ExitCode: 255}}}
	if got := resultFromProto(resultToProto(in)); !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, in)
	}
}
