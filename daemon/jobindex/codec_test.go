package jobindex

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
)

// TestCodecKeepsEveryField: a summary with every field set (but Kept, which
// the keep marks give) decodes to itself, and a JSON one too; a field added
// to api.JobSummary and not to the codec fails here.
func TestCodecKeepsEveryField(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 123, time.UTC)
	t1, t2, code := t0.Add(time.Second), t0.Add(time.Hour), -9
	s := api.JobSummary{ID: "j-abc123", Name: "j", Command: []string{"python3", "train.py", ""}, Owner: &api.Owner{UID: 1001, GID: 1002, User: "alice"},
		Node: "n1", Launcher: "slurm", State: api.StateFailed, Phase: api.PhaseProbing, Attempt: 3,
		Config:  plugins.Config{Workers: 4, GlobalBatch: 256, MachineType: "g5.xlarge", Market: plugins.MarketSpot, Nodes: 2, LRScale: 1.5},
		Created: t0, Started: &t1, Ended: &t2, ExitCode: &code, LastStep: 1 << 40}
	v := reflect.ValueOf(s)
	for i := 0; i < v.NumField(); i++ {
		if name := v.Type().Field(i).Name; name != "Kept" && v.Field(i).IsZero() {
			t.Fatalf("the sample leaves %s zero: set it (and encode it)", name)
		}
	}
	got, err := decode(encode(s))
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("decoded\n%+v, %v\nwant\n%+v", got, err, s)
	}
	b, _ := json.Marshal(s)
	if got, err := decode(b); err != nil || !reflect.DeepEqual(got, s) {
		t.Errorf("from JSON: %+v, %v", got, err)
	}
	// No owner, no times but the creation, no exit code: absent, not zero values.
	bare := api.JobSummary{ID: "b-000001", Created: t0}
	if got, err := decode(encode(bare)); err != nil || !reflect.DeepEqual(got, bare) {
		t.Errorf("a bare summary: %+v, %v", got, err)
	}
	full := encode(s)
	for _, bad := range [][]byte{nil, {}, {9}, full[:len(full)-1], append(append([]byte{}, full...), 0)} {
		if _, err := decode(bad); !errors.Is(err, errCodec) {
			t.Errorf("decode(%v...): %v, want errCodec", bad[:min(len(bad), 4)], err)
		}
	}
}

// FuzzDecode: no input makes decode panic, and what it accepts encodes
// back to itself.
func FuzzDecode(f *testing.F) {
	f.Add(encode(api.JobSummary{ID: "j-1", Command: []string{"a"}, Owner: &api.Owner{User: "u"}}))
	f.Add([]byte{codecVersion, 200, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decode(b)
		if err != nil || len(b) == 0 || b[0] != codecVersion {
			return
		}
		if again, err := decode(encode(s)); err != nil || !reflect.DeepEqual(again, s) {
			t.Errorf("%+v does not survive an encoding: %+v, %v", s, again, err)
		}
	})
}
