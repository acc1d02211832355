package objective

import "errors"

// Sentinel errors returned (wrapped) by objective selection.
var (
	// ErrNoCandidates means nothing is left after applying the bounds.
	ErrNoCandidates = errors.New("no candidates within bounds")
	// ErrUnknownKind means the objective kind is not one of time, cost, knee.
	ErrUnknownKind = errors.New("unknown objective")
)
