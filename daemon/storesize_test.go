package daemon

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// TestSizeStore: the streams' limits follow the space at start.
func TestSizeStore(t *testing.T) {
	const mb = 1 << 20
	def := history.DefaultRetention
	total := def.StepMaxBytes + def.LogMaxBytes + def.NodeMaxBytes + def.JournalMaxBytes
	sum := func(r history.Retention) int64 {
		return r.StepMaxBytes + r.LogMaxBytes + r.NodeMaxBytes + r.JournalMaxBytes
	}
	for _, tc := range []struct {
		name       string
		free       int64
		used       map[string]int64
		set        int64
		ret        history.Retention
		wantTotal  int64  // 0: don't care
		wantScaled bool   //
		wantErr    string // substring
	}{
		{name: "a big disk keeps the defaults", free: 100 << 30, wantTotal: total},
		{name: "unknown space keeps the defaults", free: -1, wantTotal: total},
		{name: "148 MB free: half of it", free: 148 * mb, wantTotal: 74 * mb, wantScaled: true},
		{name: "a 200 MB disk", free: 190 * mb, wantTotal: 95 * mb, wantScaled: true},
		{name: "what the store holds counts as its own", free: 100 * mb, used: map[string]int64{telemetry.StepStream: 100 * mb}, wantScaled: true},
		{name: "a stream never shrinks below what it holds", free: 20 * mb, used: map[string]int64{telemetry.StepStream: 180 * mb}, wantScaled: true},
		{name: "20 MB: refused, naming the space and the keys", free: 20 * mb, wantErr: "need at least 50.0 MiB"},
		{name: "limits the user set are kept", free: 64 * mb, ret: history.Retention{StepMaxBytes: 8 * mb, LogMaxBytes: 8 * mb, NodeMaxBytes: mb}, wantScaled: true},
		{name: "store_max_bytes sets the total", free: 100 << 30, set: 200 * mb, wantTotal: 200 * mb, wantScaled: true},
		{name: "store_max_bytes past the disk is refused", free: 100 * mb, set: 1 << 30, wantErr: "store_max_bytes 1024.0 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sizeStore(tc.free, tc.used, tc.set, tc.ret)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "state_dir") {
					t.Fatalf("err %v, want one saying %q and naming state_dir", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := got.Retention
			if tc.wantTotal > 0 && (sum(r) > tc.wantTotal || sum(r) < tc.wantTotal*95/100) {
				t.Errorf("total %d MiB, want %d MiB", sum(r)/mb, tc.wantTotal/mb)
			}
			if got.Scaled != tc.wantScaled {
				t.Errorf("scaled %v, want %v", got.Scaled, tc.wantScaled)
			}
			if tc.free >= 0 && got.MaxStore < sum(r) {
				t.Errorf("JetStream may store %d MiB, less than the streams' %d MiB", got.MaxStore/mb, sum(r)/mb)
			}
			for _, s := range streamLimits {
				l, d := *s.limit(&r), *s.limit(&def)
				if *s.limit(&tc.ret) > 0 && l != *s.limit(&tc.ret) {
					t.Errorf("%s: %d, but the user set %d", s.stream, l, *s.limit(&tc.ret))
				}
				if *s.limit(&tc.ret) == 0 && l < d/storeFloorDiv || l < tc.used[s.stream] {
					t.Errorf("%s: %d MiB, below its floor or what it holds", s.stream, l/mb)
				}
			}
		})
	}
}

// TestStartsOnASmallDisk: on a 200 MB state disk scavd starts, with its
// stream limits scaled down, and runs a job; on a 20 MB disk it refuses,
// saying how much it needs and which key to change.
func TestStartsOnASmallDisk(t *testing.T) {
	ctx := context.Background()
	disk := smallDisk(t, 200<<20)
	d, err := Start(ctx, Config{StateDir: filepath.Join(disk, "state"), Listen: "127.0.0.1:0", Node: "n1"}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatalf("scavd does not start on a 200 MB disk: %v", err)
	}
	defer d.Close()
	c, err := api.Dial(ctx, d.APISocket(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	j, err := c.Run(ctx, api.RunRequest{Command: []string{"/bin/sh", "-c", "echo hello"}, Dir: t.TempDir(), Config: plugins.Config{Workers: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if final := follow(t, c, j.ID, 30*time.Second); final.ExitCode == nil || *final.ExitCode != 0 {
		t.Fatalf("the job ended %+v", final)
	}
	if r := d.retention; r.StepMaxBytes >= history.DefaultRetention.StepMaxBytes {
		t.Errorf("step stream limit %d on a 200 MB disk", r.StepMaxBytes)
	}

	tiny := smallDisk(t, 20<<20)
	d2, err := Start(ctx, Config{StateDir: filepath.Join(tiny, "state"), Listen: "127.0.0.1:0", Node: "n1"}, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	if err == nil {
		d2.Close()
		t.Fatal("scavd started on a 20 MB disk")
	}
	for _, want := range []string{"need at least", "state_dir", "store_max_bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
}
