package daemon

import (
	"runtime"
	"runtime/metrics"
	"testing"
)

func TestHeapRelease(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name string
		h    heapState
		want bool
	}{
		{"a small heap at rest", heapState{free: 2 * mib, objects: 6 * mib, live: 4 * mib}, false},
		{"free pages held after a burst", heapState{free: 40 * mib, objects: 6 * mib, live: 4 * mib}, true},
		// A burst left 60 MiB live: the collector's next target is 120 MiB,
		// and what was allocated since is not collected until then.
		{"allocated since a collection that found a large heap", heapState{free: 1 * mib, objects: 70 * mib, live: 60 * mib}, true},
		{"a large heap that is still live", heapState{free: 1 * mib, objects: 62 * mib, live: 60 * mib}, false},
		{"no figures (a runtime without them)", heapState{}, false},
	} {
		if got := c.h.release(8 * mib); got != c.want {
			t.Errorf("%s: release(%+v) = %v, want %v", c.name, c.h, got, c.want)
		}
	}
}

// TestReadHeapNamesWhatTheRuntimeHas: every metric the release reads
// exists in this runtime (an unknown name would read as 0 for ever).
func TestReadHeapNamesWhatTheRuntimeHas(t *testing.T) {
	known := map[string]bool{}
	for _, d := range metrics.All() {
		known[d.Name] = true
	}
	samples := heapSamples()
	for _, s := range samples {
		if !known[s.Name] {
			t.Errorf("runtime/metrics has no %s", s.Name)
		}
	}
	runtime.GC() // live bytes are the last collection's
	if h := readHeap(samples); h.objects == 0 || h.live == 0 {
		t.Errorf("readHeap = %+v, want the heap's objects and live bytes", h)
	}
}
