package api

import (
	"errors"
	"fmt"
	"time"
)

// Faults says how a job meets faults that are not its own end: a crash
// (restarts), a worker that stops reporting steps (a stall), and a loss
// that turns NaN or infinite. Zero fields take the defaults.
type Faults struct {
	// RestartWindow is the least total back-off over a job's restarts
	// before a crash loop ends it: past --max-restarts it goes on
	// restarting while its back-off so far is shorter, so that a fault
	// that lasts a while (a full disk, a network down) is outlasted
	// (0: DefaultRestartWindow; --max-restarts 0 still never restarts).
	RestartWindow Duration `json:"restart_window,omitempty"`
	// StallTimeout is how long the job's ranks may report no step before
	// it counts as stalled (0: 10 times the slowest step seen, at least
	// MinStallTimeout).
	StallTimeout Duration `json:"stall_timeout,omitempty"`
	// OnStall is what a stall does: StallReport (the default) marks the
	// job stalled; StallRestart also restarts it from its checkpoint.
	OnStall string `json:"on_stall,omitempty"`
	// OnNaN is what a loss that turns NaN or infinite does: NaNWarn (the
	// default) records the event and goes on; NaNStop stops the job.
	OnNaN string `json:"on_nan,omitempty"`
}

// Defaults and bounds of Faults.
const (
	DefaultRestartWindow = 2 * time.Minute
	MaxRestartWindow     = 24 * time.Hour
	MinStallTimeout      = 5 * time.Minute
	MaxStallTimeout      = 7 * 24 * time.Hour
	StallReport          = "report"
	StallRestart         = "restart"
	NaNWarn              = "warn"
	NaNStop              = "stop"
	// MaxGrace bounds a job's grace: a stop (and a daemon's shutdown)
	// waits for it.
	MaxGrace = time.Hour
)

// Window is the job's restart window, its default filled in.
func (f Faults) Window() time.Duration {
	if f.RestartWindow == 0 {
		return DefaultRestartWindow
	}
	return f.RestartWindow.D()
}

// Validate collects every problem with f.
func (f Faults) Validate() error {
	var errs []error
	if w := f.RestartWindow.D(); w < 0 || w > MaxRestartWindow {
		errs = append(errs, fmt.Errorf("--restart-window %s: use 0 (the default, %s) to %s", w, DefaultRestartWindow, MaxRestartWindow))
	}
	if s := f.StallTimeout.D(); s != 0 && (s < time.Second || s > MaxStallTimeout) {
		errs = append(errs, fmt.Errorf("--stall-timeout %s: use 0 (10 times the slowest step, at least %s) or 1s to %s", s, MinStallTimeout, MaxStallTimeout))
	}
	switch f.OnStall {
	case "", StallReport, StallRestart:
	default:
		errs = append(errs, fmt.Errorf("--on-stall %q: use %s or %s", f.OnStall, StallReport, StallRestart))
	}
	switch f.OnNaN {
	case "", NaNWarn, NaNStop:
	default:
		errs = append(errs, fmt.Errorf("--on-nan %q: use %s or %s", f.OnNaN, NaNWarn, NaNStop))
	}
	return errors.Join(errs...)
}

// Stall is a running job whose ranks stopped reporting steps.
type Stall struct {
	// Since is when the last step record arrived; Step is the newest step.
	Since time.Time `json:"since"`
	Step  int64     `json:"step"`
	// Timeout is the stall timeout it passed.
	Timeout Duration `json:"timeout"`
}

// BadLoss is where a job's loss turned NaN or infinite.
type BadLoss struct {
	// Attempt and Step are where it first did; Value says how ("NaN", "+Inf", "-Inf").
	Attempt int    `json:"attempt"`
	Step    int64  `json:"step"`
	Value   string `json:"value"`
	// Time is when the daemon saw it.
	Time time.Time `json:"t"`
}
