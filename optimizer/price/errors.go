package price

import "errors"

// Sentinel errors returned (wrapped) by the catalog.
var (
	// ErrInvalid means a catalog entry fails validation.
	ErrInvalid = errors.New("invalid catalog entry")
	// ErrUnknownType means no machine type has the requested name.
	ErrUnknownType = errors.New("unknown machine type")
	// ErrNoPrice means a machine type has no price of the requested kind.
	ErrNoPrice = errors.New("no price")
)
