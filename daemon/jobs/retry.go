package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap"
)

// keepTrying calls fn until it succeeds, fails for good (a conflict), or
// ctx ends, waiting twice as long after each failure, from 250 ms up to 5 s.
// It logs the first failure and the success after it.
func keepTrying(ctx context.Context, log *zap.Logger, what string, fn func() error) error {
	tries := 0
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		tries++
		err := fn()
		if errors.Is(err, ErrConflict) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	},
		backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: 250 * time.Millisecond, Multiplier: 2, MaxInterval: 5 * time.Second}),
		backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, _ time.Duration) {
			if tries == 1 {
				log.Warn(what+": the store refuses it; trying again until it takes it (is the state disk full?)", zap.Error(err))
			}
		}))
	switch {
	case err == nil && tries > 1:
		log.Info(what+": done after waiting", zap.Int("tries", tries))
	case errors.Is(err, ErrConflict):
		log.Error(what, zap.Error(err))
	case err != nil:
		log.Error(what+": gave up, the daemon is stopping", zap.Error(err))
	}
	return err
}
