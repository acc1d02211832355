package stepstats

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// fuzzRecords decodes step records from fuzz bytes, 48 bytes each: any
// step, rank, world, attempt and time (NaN and infinities included), so
// that every reader meets the values a store may hold.
func fuzzRecords(data []byte) []telemetry.StepRecord {
	var out []telemetry.StepRecord
	for len(data) >= 48 && len(out) < 512 {
		u := func(i int) uint64 { return binary.LittleEndian.Uint64(data[i*8:]) }
		f := func(i int) *float64 { v := math.Float64frombits(u(i)); return &v }
		r := telemetry.StepRecord{
			V: 1, Job: "j", Step: int64(u(0)), Rank: int(int32(u(1))), World: int(int32(u(1) >> 32)),
			Attempt: int(int8(u(2))), Time: *f(3), Seconds: *f(4), LocalBatch: int(int16(u(2) >> 8)),
			GlobalBatch: int(int32(u(2) >> 24)), Samples: int(int8(u(2) >> 56)), Count: int(int8(u(5) >> 56)),
			Loss: f(5), Biased: u(2)&1 == 1,
		}
		if u(2)&2 == 2 {
			r.LocalSqr, r.AvgSqr = f(4), f(3)
		}
		if u(2)&4 == 4 {
			r.ComputeSeconds, r.SyncSeconds = f(4), f(5)
		}
		if u(2)&8 == 8 {
			r.From = telemetry.FromOutput
		}
		out = append(out, r)
		data = data[48:]
	}
	return out
}

// fuzzSeed encodes records for the seed corpus (the inverse of fuzzRecords
// for the fields it sets).
func fuzzSeed(recs ...[6]uint64) []byte {
	var b []byte
	for _, r := range recs {
		for _, v := range r {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
	}
	return b
}

// FuzzStepstats runs every reader of step records over records with
// extreme values: each must return (no loop over a range of steps, ranks
// or worlds), and the summary's counts must stay within their bounds.
func FuzzStepstats(f *testing.F) {
	one := math.Float64bits(1)
	world := func(rank, world int32) uint64 { return uint64(uint32(rank)) | uint64(uint32(world))<<32 }
	f.Add(fuzzSeed([6]uint64{1, world(0, 1), 32 << 8, one, one, one}, [6]uint64{math.MaxInt64, world(0, 1), 32 << 8, one, one, one}), 10)
	f.Add(fuzzSeed([6]uint64{1 << 63, world(0, 1), 0, math.Float64bits(1e300), 0, math.Float64bits(math.NaN())},
		[6]uint64{math.MaxInt64, world(999999, 1000000), 14, math.Float64bits(math.Inf(1)), math.Float64bits(-1), 0}), math.MaxInt)
	f.Add(fuzzSeed([6]uint64{1, world(0, math.MaxInt32), 6, one, one, one}, [6]uint64{3, world(0, math.MaxInt32), 6, one, one, one}), 1)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		recs := fuzzRecords(data)
		s := Summarize(recs)
		if s.Records != len(recs) || s.Missing < 0 || s.Duplicates < 0 || s.Duplicates > len(recs) {
			t.Fatalf("summary of %d records: %+v", len(recs), s)
		}
		_ = RateSeries(recs, 0, n)
		_ = LossSeries(recs, 0, n)
		_ = NoiseSeries(recs, 32, 0, n)
		var rate Rate
		var w Window
		noise := Noise{M0: 32}
		for _, r := range recs {
			rate.Add(r)
			w.Add(r, 32)
			noise.Add(r)
		}
		_ = rate.PerSecond()
		_, _ = w.Mean()
		_, _ = noise.Scale()
	})
}
