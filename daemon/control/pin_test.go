package control

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// stillJob is a job that stays where it is: every move is refused.
type stillJob struct {
	mu  sync.Mutex
	cfg plugins.Config
}

func (s *stillJob) Current() (int, plugins.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return 1, s.cfg
}
func (s *stillJob) LastStep() int64  { return 0 }
func (s *stillJob) SetNoise(float64) {}

// TestPinnedJobIsNotMoved: a policy that would probe another configuration
// at its first report hands no verdict that moves a pinned job (scavctl
// move --pin), and does once the job is released.
func TestPinnedJobIsNotMoved(t *testing.T) {
	start := plugins.Config{Workers: 1, GlobalBatch: 32}
	j := api.Job{ID: "pin-1", Config: start, Optimize: api.Optimize{Policy: "full", Objective: "time", TargetSamples: 32 * 100000,
		MinWorkers: 1, MaxWorkers: 2, MinBatch: 32, MaxBatch: 64}}
	job := &stillJob{cfg: start}
	verdicts := make(chan Verdict, 16)
	c, err := New(j, nil, job, verdicts, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	c.Pin(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	step := int64(0)
	feed := func(n int) {
		for range n {
			step++
			c.Steps([]telemetry.StepRecord{{Job: j.ID, Attempt: 1, Rank: 0, World: 1, Step: step, Time: float64(step) * 0.05,
				Seconds: 0.05, Samples: 32, LocalBatch: 32, GlobalBatch: 32}})
			time.Sleep(time.Millisecond)
		}
	}
	moved := func(within time.Duration) (api.Decision, bool) {
		deadline := time.After(within)
		for {
			select {
			case v := <-verdicts:
				if v.Decision.To != start {
					v.Reply <- errorString("refused: the test's job stays")
					return v.Decision, true
				}
			case <-deadline:
				return api.Decision{}, false
			}
		}
	}
	feed(200)
	if d, ok := moved(time.Second); ok {
		t.Fatalf("a pinned job got a verdict that moves it: %+v", d)
	}
	c.Pin(false)
	feed(200)
	if _, ok := moved(5 * time.Second); !ok {
		t.Fatal("released, the job got no verdict that moves it: the test's policy would not move it at all")
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
