package jobs

import (
	"testing"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// TestOutputStepsBounded: a progress line that jumps far ahead makes a
// bounded number of records, none with a step time under a microsecond
// (issue 21: "step 300000000" after steps 1-3 made 1,000 records of
// 3e-20 s each, and a median step of 0.00 ms).
func TestOutputStepsBounded(t *testing.T) {
	for _, c := range []struct {
		name  string
		lines []string
		max   int // records at most
	}{
		{"a jump of 3e8 steps at once", []string{"step 1", "step 2", "step 3", "step 300000000"}, 4},
		{"step 2^63-1", []string{"step 1", "step 9223372036854775807"}, 2},
		{"a bar far ahead", []string{"step 1", "  5%|▌ | 5000000/100000000 [00:01<00:19, 4999999.00it/s]"}, 1 + maxStepsPerLine},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []telemetry.StepRecord
			o, err := newOutputSteps("", func(r telemetry.StepRecord) error { got = append(got, r); return nil })
			if err != nil {
				t.Fatal(err)
			}
			var prog progress
			prog.begin(1, 0, 0, 0)
			o.attemptStarted(1, plugins.Config{Workers: 1, GlobalBatch: 8}, 0)
			for _, l := range c.lines {
				o.line("j-000001", &prog, 0, plugins.Stdout, l, zap.NewNop())
			}
			if len(got) > c.max {
				t.Errorf("%d records, want at most %d", len(got), c.max)
			}
			for _, r := range got {
				if r.Seconds != 0 && r.Seconds < minStepSeconds {
					t.Fatalf("step %d: dt %g s, under %g s", r.Step, r.Seconds, minStepSeconds)
				}
				if err := r.Validate(); err != nil {
					t.Fatalf("step %d: %v", r.Step, err)
				}
			}
		})
	}
}
