package perf

import "errors"

// Sentinel errors returned (wrapped) by the throughput models.
var (
	// ErrNoPoints means a fit was asked for with no measurements.
	ErrNoPoints = errors.New("no measurements")
	// ErrBadPoint means a measurement is not finite, not positive, or
	// inconsistent (more nodes than replicas, sync time above step time).
	ErrBadPoint = errors.New("bad measurement")
	// ErrBadQuery means a prediction was asked for an impossible placement.
	ErrBadQuery = errors.New("bad query")
	// ErrFit means the optimiser failed to fit the model.
	ErrFit = errors.New("fit failed")
	// ErrUnknownForm means a stored model names a form this package lacks.
	ErrUnknownForm = errors.New("unknown model form")
)
