package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
)

// Stop asks a running job to stop; grace 0 uses the job's own. Asking again
// with a shorter grace brings the SIGKILL forward.
func (g *Registry) Stop(id string, grace time.Duration) (api.Job, error) {
	if grace < 0 || grace > api.MaxGrace {
		return api.Job{}, fmt.Errorf("%w: stop job %s: grace %s: use 0 (the job's own) to %s", api.ErrBadRequest, id, grace, api.MaxGrace)
	}
	r := g.running(id)
	if r == nil {
		return api.Job{}, fmt.Errorf("stop job %s: %w (or it has already ended)", id, api.ErrNoJob)
	}
	r.requestStop(grace)
	return r.snapshot(), nil
}

// Move asks a running job to relaunch at cfg and waits until its workers
// have checkpointed and exited (or the move failed).
func (g *Registry) Move(ctx context.Context, id string, cfg plugins.Config, reason string) (api.Job, error) {
	return g.move(ctx, id, cfg, reason, nil)
}

// Pin moves a running job to cfg (no move when it runs there) and pins it
// there (pin), or releases it: the job's controller moves a pinned job no
// more (scavctl move --pin, --unpin).
func (g *Registry) Pin(ctx context.Context, id string, cfg plugins.Config, reason string, pin bool) (api.Job, error) {
	return g.move(ctx, id, cfg, reason, &pin)
}

// move is Move, pinning or releasing the job when pin is set.
func (g *Registry) move(ctx context.Context, id string, cfg plugins.Config, reason string, pin *bool) (api.Job, error) {
	r := g.running(id)
	if r == nil {
		return api.Job{}, fmt.Errorf("move job %s: %w (or it has already ended)", id, api.ErrNoJob)
	}
	if cfg.LRScale == 0 {
		cfg.LRScale = 1
	}
	spec := plugins.AttemptSpec{JobID: id, Attempt: 1, Command: r.snapshot().Command, Config: cfg}
	if err := spec.Validate(); err != nil {
		return api.Job{}, fmt.Errorf("%w: move job %s: %w", api.ErrBadRequest, id, err)
	}
	if err := r.requestMove(ctx, moveReq{cfg: cfg, reason: reason, pin: pin}); err != nil {
		return api.Job{}, fmt.Errorf("move job %s: %w", id, err)
	}
	return r.snapshot(), nil
}

// requestStop asks the job to stop with grace (0: its own).
func (r *runner) requestStop(grace time.Duration) {
	if grace <= 0 {
		grace = r.snapshot().Grace.D()
	}
	select {
	case r.stops <- grace:
	default: // a stop is already waiting to be taken
	}
}

// requestMove asks the job to relaunch at cfg and waits until its workers
// have checkpointed and exited, or the move failed, or ctx is done.
func (r *runner) requestMove(ctx context.Context, m moveReq) error {
	m.reply = make(chan error, 1)
	select {
	case r.moves <- m:
	case <-r.done:
		return fmt.Errorf("%w (it has ended)", api.ErrNoJob)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-m.reply:
		return err
	case <-r.done:
		return fmt.Errorf("%w (it has ended)", api.ErrNoJob)
	case <-ctx.Done():
		return ctx.Err()
	}
}
