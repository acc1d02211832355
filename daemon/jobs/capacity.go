package jobs

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/words"
)

// capacityHint says where each built-in launcher's limit comes from.
var capacityHint = map[string]string{
	"local": "this node's slots: scavd --local-slots, default the number of CPUs",
	"ssh":   "the slots of the SSH hosts that answer",
	"slurm": "the CPUs of the Slurm allocation, or of the partition's nodes",
}

// checkCapacity refuses a request for more workers than the launcher can
// start (Capabilities.MaxWorkers), the optimizer's range included, naming
// the limit. A launcher that cannot say is not held to one here; its Start
// refuses what it cannot do.
func (g *Registry) checkCapacity(ctx context.Context, req api.RunRequest) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	caps, err := g.o.Launcher.Capabilities(ctx)
	if err != nil {
		g.log.Warn("launcher capabilities: the request's workers are not checked against them", zap.Error(err))
		return nil
	}
	return overCapacity(req, g.o.Launcher.Name(), caps.MaxWorkers)
}

// overCapacity is the error of a request that asks for more than limit
// workers of launcher (nil when it fits or limit is 0, unbounded).
func overCapacity(req api.RunRequest, launcher string, limit int) error {
	if limit <= 0 {
		return nil
	}
	hint := capacityHint[launcher]
	if hint == "" {
		hint = "its capabilities"
	}
	var errs []error
	if req.Config.Workers > limit {
		errs = append(errs, fmt.Errorf("--workers %d: launcher %s starts at most %s (%s)", req.Config.Workers, launcher, words.Count(limit, "worker"), hint))
	}
	if o := req.Optimize; o.Active() && o.MaxWorkers > limit && o.MaxWorkers != req.Config.Workers {
		errs = append(errs, fmt.Errorf("--workers %d:%d: the range goes above the %s launcher %s starts at most (%s)",
			max(o.MinWorkers, req.Config.Workers), o.MaxWorkers, words.Count(limit, "worker"), launcher, hint))
	}
	return errors.Join(errs...)
}
