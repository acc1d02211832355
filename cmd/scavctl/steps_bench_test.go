package main

import (
	"bufio"
	"encoding/json"
	"io"
	"testing"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// benchRecord is a step record with every column set.
func benchRecord() telemetry.StepRecord {
	c, y, l, ls, as := 0.0812, 0.0204, 2.3456, 3.14159, 2.71828
	return telemetry.StepRecord{V: 1, Job: "bench-000001", Attempt: 1, Rank: 1, World: 2, Step: 123456, Time: 1796161179.426775,
		Seconds: 0.1012, Samples: 32, LocalBatch: 32, GlobalBatch: 64, ComputeSeconds: &c, SyncSeconds: &y, Loss: &l, LocalSqr: &ls, AvgSqr: &as}
}

// BenchmarkStepTable and BenchmarkStepJSON render a step record as
// `scavctl steps` does, as a table line and as a JSON line: the table must
// be no slower.
func BenchmarkStepTable(b *testing.B) {
	w := bufio.NewWriter(io.Discard)
	r := benchRecord()
	var line []byte
	for range b.N {
		line = stepRow(line[:0], &r)
		_, _ = w.Write(line)
	}
}

func BenchmarkStepJSON(b *testing.B) {
	enc := json.NewEncoder(bufio.NewWriter(io.Discard))
	r := benchRecord()
	for range b.N {
		_ = enc.Encode(r)
	}
}
