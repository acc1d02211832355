//go:build !(linux && cgo)

package gpu

import (
	"fmt"

	"go.uber.org/zap"
)

// NVML is unavailable in a build without cgo (or off Linux): go-nvml needs
// cgo to load the library. Such a build reads GPUs with nvidia-smi.
type NVML struct{ None }

// OpenNVML reports that this build cannot use NVML.
func OpenNVML(*zap.Logger) (*NVML, error) {
	return nil, fmt.Errorf("%w: nvml: scavd was built without cgo", ErrUnavailable)
}
