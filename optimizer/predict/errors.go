package predict

import "errors"

// Sentinel errors returned (wrapped) by prediction.
var (
	// ErrNoModel means no step-time model exists for a candidate's type.
	ErrNoModel = errors.New("no step-time model")
	// ErrNoPrice means no price exists for a candidate's type.
	ErrNoPrice = errors.New("no price")
	// ErrBadCandidate means a candidate is impossible (K < N, B < K, ...).
	ErrBadCandidate = errors.New("bad candidate")
	// ErrBadInputs means the job inputs are not usable (M0 ≤ 0, ...).
	ErrBadInputs = errors.New("bad inputs")
)
