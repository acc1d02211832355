package daemon

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// After a burst (a user's flood of connections, a job's output), the Go
// heap shrinks again, but scavd's resident memory stays at the burst's
// level for minutes, for two reasons:
//
//   - the runtime hands the pages it freed back to the system only at a
//     bounded pace;
//   - the next collection comes only when the heap has grown by as much
//     as was live at the last one (GOGC): a burst that left a large live
//     heap (the store's message-block caches, which it gives back to a
//     pool when unused) sets that target high, and until the daemon's
//     steady allocation reaches it, nothing is collected. The pooled
//     buffers go only after two collections.
//
// Every releaseEvery, when more than releaseOver of the heap is free and
// still held, or has been allocated since the last collection, the daemon
// collects and hands the free pages back at once (debug.FreeOSMemory; a
// small heap takes milliseconds).
const (
	releaseEvery = 10 * time.Second
	releaseOver  = 8 << 20
)

// heapState is what a release decision reads of the runtime's heap, in bytes.
type heapState struct {
	// free is held by the heap, unused, and not yet returned to the system.
	free uint64
	// objects is in heap objects now: live, garbage not yet collected, new.
	objects uint64
	// live was marked live by the last collection.
	live uint64
}

// heapSamples are the runtime/metrics samples of heapState's fields, for readHeap.
func heapSamples() []metrics.Sample {
	return []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
}

// readHeap reads the heap's state into samples (heapSamples); a field the
// runtime does not have is 0.
func readHeap(samples []metrics.Sample) heapState {
	metrics.Read(samples)
	v := func(i int) uint64 {
		if samples[i].Value.Kind() == metrics.KindUint64 {
			return samples[i].Value.Uint64()
		}
		return 0
	}
	return heapState{free: v(0), objects: v(1), live: v(2)}
}

// release says whether a collection and a release pay: more than over is
// free, or has been allocated since the last collection.
func (h heapState) release(over uint64) bool {
	return h.free > over || h.objects > h.live+over
}

// startMemoryRelease releases free heap memory every releaseEvery until
// stop, which waits for it.
func startMemoryRelease(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		samples := heapSamples()
		t := time.NewTicker(releaseEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if readHeap(samples).release(releaseOver) {
				debug.FreeOSMemory()
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
