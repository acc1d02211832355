package main

import (
	"strings"
	"testing"
)

// TestRunFlagsCountTheWork: the targets become samples, the base batch goes
// with them, and a base batch without a target is refused, naming the fix.
func TestRunFlagsCountTheWork(t *testing.T) {
	for _, c := range []struct {
		f       runFlags
		samples int64
		base    int
		err     string
	}{
		{runFlags{targetSteps: 100}, 3200, 0, ""},
		{runFlags{targetSamples: 5000, baseBatch: 16}, 5000, 16, ""},
		{runFlags{baseBatch: 16}, 0, 0, "--base-batch counts the work of a target: give --target-steps"},
		{runFlags{targetSamples: 5000, baseBatch: -1}, 0, 0, "--base-batch: must not be negative"},
	} {
		o, err := c.f.optimize(1, 2, 32, 128)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: err %v, want %q", c.f, err, c.err)
			}
		case err != nil:
			t.Errorf("%+v: %v", c.f, err)
		case o.TargetSamples != c.samples || o.BaseBatch != c.base:
			t.Errorf("%+v: target %d base %d, want %d and %d", c.f, o.TargetSamples, o.BaseBatch, c.samples, c.base)
		}
	}
}
