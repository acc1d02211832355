package cloudvm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

// TestRetry checks the provider calls' retries: a throttled or internal
// error is retried Options.Retries times, another error is not, and a
// context that ends meanwhile is named with the error being retried.
func TestRetry(t *testing.T) {
	l := &Launcher{o: Options{Retries: 3, RetryBase: time.Millisecond}, log: zaptest.NewLogger(t)}
	for _, tc := range []struct {
		name      string
		fail      error // every call's error
		failFirst int   // fail only the first calls (0: all)
		want      int   // calls made
		ok        bool
	}{
		{"throttled then ok", provider.ErrThrottled, 2, 3, true},
		{"throttled for good", provider.ErrThrottled, 0, 4, false},
		{"internal for good", fmt.Errorf("x: %w", provider.ErrInternal), 0, 4, false},
		{"capacity: no retry", provider.ErrCapacity, 0, 1, false},
		{"not found: no retry", provider.ErrNotFound, 0, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			v, err := retry(context.Background(), l, "test", func() (int, error) {
				calls++
				if tc.failFirst == 0 || calls <= tc.failFirst {
					return 0, tc.fail
				}
				return 7, nil
			})
			if calls != tc.want || (err == nil) != tc.ok || (tc.ok && v != 7) || (!tc.ok && !errors.Is(err, tc.fail)) {
				t.Fatalf("%d calls, %d, %v; want %d calls, ok %v", calls, v, err, tc.want, tc.ok)
			}
		})
	}
	t.Run("context ends", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		slow := &Launcher{o: Options{Retries: 5, RetryBase: time.Hour}, log: l.log}
		go func() { time.Sleep(20 * time.Millisecond); cancel() }()
		_, err := retry(ctx, slow, "test", func() (int, error) { return 0, provider.ErrThrottled })
		if !errors.Is(err, provider.ErrThrottled) || !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v: want both the throttling and the cancellation", err)
		}
	})
}
