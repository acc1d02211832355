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

// view is a view of 10,000 jobs of alice's, one of them named target.
func view() *Index {
	x := &Index{byID: map[string]*entry{}, kept: map[string]uint64{}, owners: map[ownerKey]*api.Owner{}, words: map[string]string{}}
	for i := range 10_000 {
		name := fmt.Sprintf("bench%d", i%50)
		if i == 5000 {
			name = "target"
		}
		s := job(fmt.Sprintf("%s-%06x", name, i), name, &alice, api.StateSucceeded, i)
		s.Command = []string{"/usr/bin/python3", "train.py", "--epochs", "3"}
		x.put(s, uint64(i+1))
	}
	return x
}

// BenchmarkList reads the newest 100 of 10,000 jobs, as scavctl jobs does.
func BenchmarkList(b *testing.B) {
	x := view()
	b.ResetTimer()
	for range b.N {
		if p, err := x.List(api.JobsRequest{Limit: 100}, alice); err != nil || len(p.Jobs) != 100 || p.More != 9900 {
			b.Fatal(len(p.Jobs), p.More, err)
		}
	}
}

// BenchmarkResolveName names a job by its name among 10,000.
func BenchmarkResolveName(b *testing.B) {
	x := view()
	b.ResetTimer()
	for range b.N {
		if s, _, err := x.Resolve("target", alice, false); err != nil || s.Name != "target" {
			b.Fatal(s, err)
		}
	}
}
