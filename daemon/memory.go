package daemon

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// After a burst (a user's flood of connections, a job's output), the Go
// heap shrinks again, but the runtime hands the pages it freed back to the
// system only at a bounded pace: scavd's resident memory stays at the
// burst's level for minutes. Every releaseEvery, when more than releaseOver
// of the heap is free and still held, the daemon hands it back at once
// (debug.FreeOSMemory: a collection and a release; a small heap takes
// milliseconds).
const (
	releaseEvery = 15 * time.Second
	releaseOver  = 8 << 20
)

// startMemoryRelease releases free heap memory every releaseEvery until
// stop, which waits for it.
func startMemoryRelease(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sample := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
		t := time.NewTicker(releaseEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 && sample[0].Value.Uint64() > releaseOver {
				debug.FreeOSMemory()
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
