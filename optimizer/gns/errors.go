package gns

import "errors"

// Sentinel errors returned (wrapped) by the estimator.
var (
	// ErrBadSample means a sample has non-finite or negative norms, a count
	// below one, or a non-positive scale.
	ErrBadSample = errors.New("bad gradient sample")
	// ErrTooFew means a sample with count 1 cannot be estimated without the
	// difference estimator.
	ErrTooFew = errors.New("single gradient: use the difference estimator")
	// ErrShape means two gradients differ in length.
	ErrShape = errors.New("gradient shapes differ")
)
