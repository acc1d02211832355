package jobindex

import (
	"fmt"
	"testing"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
)

// BenchmarkOpen reads an index of 10,000 jobs into a view, as a daemon
// does at start.
func BenchmarkOpen(b *testing.B) {
	_, x := openB(b)
	ctx := b.Context()
	ss := make([]api.JobSummary, 10_000)
	for i := range ss {
		ss[i] = job(fmt.Sprintf("bench%d-%06x", i%50, i), fmt.Sprintf("bench%d", i%50), &alice, api.StateSucceeded, i)
		ss[i].Command = []string{"/usr/bin/python3", "train.py", "--epochs", "3"}
	}
	if err := x.create(ctx, ss); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		y, err := Open(ctx, x.kv, nil, zap.NewNop())
		if err != nil {
			b.Fatal(err)
		}
		if y.Len() != len(ss) {
			b.Fatalf("%d jobs read, want %d", y.Len(), len(ss))
		}
		y.Close()
	}
}
