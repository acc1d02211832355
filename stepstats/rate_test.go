package stepstats

import (
	"testing"

	"github.com/scavenger-ml/scavenger/telemetry"
)

func TestRate(t *testing.T) {
	var r Rate
	step := func(rank int, tm float64, global, samples int) telemetry.StepRecord {
		return telemetry.StepRecord{Rank: rank, World: 2, Time: tm, GlobalBatch: global, Samples: samples}
	}
	if r.PerSecond() != 0 {
		t.Fatal("a rate before any step")
	}
	r.Add(step(0, 10, 64, 32))
	if r.PerSecond() != 0 {
		t.Fatal("a rate from one step")
	}
	for i := 1; i <= 2*RateSteps; i++ {
		r.Add(step(0, 10+float64(i)/2, 64, 32))
		r.Add(step(1, 99, 64, 32)) // rank 1's records do not count
	}
	if got := r.PerSecond(); got != 128 {
		t.Errorf("rate %v, want 64 samples per 0.5 s", got)
	}
	r.Reset()
	r.Add(step(0, 0, 0, 16)) // no global batch: the worker's samples times the world
	r.Add(step(0, 1, 0, 16))
	if got := r.PerSecond(); got != 32 {
		t.Errorf("rate %v after a reset, want 16·2 samples per second", got)
	}
}
