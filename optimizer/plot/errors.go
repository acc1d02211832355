package plot

import "errors"

// ErrFormat means the file name does not end in a supported extension.
var ErrFormat = errors.New("unsupported plot format")
