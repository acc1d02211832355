// Package python carries the scavenger python client inside the Go binaries,
// so that launchers can unpack it and put it on the workers' PYTHONPATH:
// `import scavenger` then works in any training script with nothing installed.
// The same package is installable with `pip install ./python`.
package python

import "embed"

// Client holds the python package's modules, at scavenger/*.py.
//
//go:embed scavenger/*.py
var Client embed.FS
