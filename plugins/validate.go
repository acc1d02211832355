package plugins

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Validate checks the spec and reports every problem at once, as one error
// wrapping ErrInvalidSpec and joining one error per problem. Rules: JobID is
// set; Attempt >= 1; Command is non-empty with a non-empty program; Workers
// >= 1; GlobalBatch is 0 (unknown) or at least Workers and divisible by it;
// a command that uses {batch_size} or {local_batch_size} needs a known batch;
// Nodes >= 0; LRScale is finite and >= 0 (0 means 1); Mode is empty, auto,
// ranks or self; every Env entry is KEY=VALUE with a key that is not a
// contract variable (the launcher owns those, see WorkerEnv).
func (s AttemptSpec) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if s.JobID == "" {
		add("job id is empty")
	}
	if s.Attempt < 1 {
		add("attempt %d is less than 1", s.Attempt)
	}
	if s.StartStep < 0 {
		add("start step %d is negative", s.StartStep)
	}
	if len(s.Command) == 0 {
		add("command is empty")
	} else if s.Command[0] == "" {
		add("command program (argv[0]) is empty")
	}
	c := s.Config
	if c.Workers < 1 {
		add("workers %d is less than 1", c.Workers)
	}
	switch {
	case c.GlobalBatch < 0:
		add("global batch %d is negative", c.GlobalBatch)
	case c.GlobalBatch == 0:
		for _, a := range s.Command {
			if strings.Contains(a, PlaceholderBatch) || strings.Contains(a, PlaceholderLocalBatch) {
				add("command argument %q uses the batch size but the global batch is not set", a)
				break
			}
		}
	case c.Workers >= 1 && c.GlobalBatch < c.Workers:
		add("global batch %d is smaller than the %d workers", c.GlobalBatch, c.Workers)
	case c.Workers >= 1 && c.GlobalBatch%c.Workers != 0:
		add("global batch %d is not divisible by the %d workers", c.GlobalBatch, c.Workers)
	}
	if c.Nodes < 0 {
		add("nodes %d is negative", c.Nodes)
	}
	if math.IsNaN(c.LRScale) || math.IsInf(c.LRScale, 0) || c.LRScale < 0 {
		add("lr scale %v is not a finite non-negative number", c.LRScale)
	}
	switch s.Mode {
	case "", ModeAuto, ModeRanks, ModeSelf:
	default:
		add("launch mode %q is not auto, ranks or self", s.Mode)
	}
	for _, kv := range s.Env {
		k, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
			add("env entry %q is not KEY=VALUE", kv)
		case contractKeys[k]:
			add("env %s is set by the launcher and may not be overridden", k)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: job %q attempt %d: %w", ErrInvalidSpec, s.JobID, s.Attempt, errors.Join(errs...))
}
