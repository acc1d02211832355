package plot

import "errors"

// ErrFormat means the file name does not end in a supported extension.
var ErrFormat = errors.New("unsupported plot format")

// ErrNoData means there is nothing to draw.
var ErrNoData = errors.New("no data to plot")
