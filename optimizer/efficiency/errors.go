package efficiency

import "errors"

// ErrBadInput means an argument is negative, zero where it must be positive,
// or not finite.
var ErrBadInput = errors.New("bad input")
