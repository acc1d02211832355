package telemetry

import (
	"strings"
	"testing"
	"time"
)

func f64(v float64) *float64 { return &v }
func u64(v uint64) *uint64   { return &v }

func TestNodeSampleRoundTrip(t *testing.T) {
	in := NodeSample{Kind: NodeGPU, Node: "gpu01", Time: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), Source: "nvml",
		GPUs: []GPUStat{{Index: 0, UUID: "GPU-a", Utilization: f64(0.97), MemoryUsedBytes: u64(1 << 30), SMClockHertz: f64(1.98e9),
			Processes: []GPUProcess{{PID: 42, Job: "cnn-1a2b3c"}}}}}
	out, err := DecodeNodeSample(in.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if out.V != NodeSchemaVersion || out.Node != "gpu01" || *out.GPUs[0].Utilization != 0.97 || out.GPUs[0].Processes[0].Job != "cnn-1a2b3c" ||
		out.GPUs[0].PowerWatts != nil || !out.Time.Equal(in.Time) {
		t.Errorf("round trip: %+v", out)
	}
	host := NodeSample{Kind: NodeHost, Node: "gpu01", Time: in.Time, Host: &HostStat{CPUs: 2, Jobs: []JobUsage{{Job: "cnn-1a2b3c", RSSBytes: 5}}}}
	if _, err := DecodeNodeSample(host.Encode()); err != nil {
		t.Errorf("host sample: %v", err)
	}
}

func TestDecodeNodeSampleRejects(t *testing.T) {
	for _, tc := range []struct{ in, why string }{
		{`{`, "unexpected end"},
		{`{"v":2,"kind":"gpu","node":"n","t":"2026-11-29T10:00:00Z"}`, "schema version 2"},
		{`{"v":1,"kind":"disk","node":"n","t":"2026-11-29T10:00:00Z"}`, "kind"},
		{`{"v":1,"kind":"gpu","node":"a.b","t":"2026-11-29T10:00:00Z"}`, "node"},
		{`{"v":1,"kind":"gpu","node":"n"}`, "no time"},
		{`{"v":1,"kind":"host","node":"n","t":"2026-11-29T10:00:00Z"}`, "without host"},
		{`{"v":1,"kind":"gpu","node":"n","t":"2026-11-29T10:00:00Z","gpus":[{"index":0,"util":97}]}`, "util"},
		{`{"v":1,"kind":"gpu","node":"n","t":"2026-11-29T10:00:00Z","gpus":[{"index":-1}]}`, "index"},
		{`{"v":1,"kind":"host","node":"n","t":"2026-11-29T10:00:00Z","host":{"jobs":[{"job":"a b"}]}}`, "job"},
	} {
		if _, err := DecodeNodeSample([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("DecodeNodeSample(%s) = %v, want an error about %q", tc.in, err, tc.why)
		}
	}
}

func TestSubjectNode(t *testing.T) {
	for in, want := range map[string]string{"gpu01": "gpu01", "gpu01.cluster.local": "gpu01_cluster_local", "": "node", "a b*>": "a_b__"} {
		if got := SubjectNode(in); got != want || !ValidNodeName(got) {
			t.Errorf("SubjectNode(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzDecodeNodeSample(f *testing.F) {
	f.Add([]byte(`{"v":1,"kind":"gpu","node":"n","t":"2026-11-29T10:00:00Z","gpus":[{"index":0,"util":0.5,"processes":[{"pid":1}]}]}`))
	f.Add([]byte(`{"v":1,"kind":"host","node":"n","t":"2026-11-29T10:00:00Z","host":{"cpus":2,"cpu_util":0.3,"jobs":[{"job":"j","processes":[]}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeNodeSample(b)
		if err != nil {
			return
		}
		again, err := DecodeNodeSample(s.Encode())
		if err != nil {
			t.Fatalf("a decoded sample does not decode again: %v", err)
		}
		if again.Kind != s.Kind || again.Node != s.Node || len(again.GPUs) != len(s.GPUs) {
			t.Fatalf("re-decoded sample differs: %+v vs %+v", again, s)
		}
	})
}
