// Package gpu reads a node's GPUs: utilisation, memory, power, temperature,
// SM clock, ECC and XID errors, and the compute processes on each device. It
// reads them through NVML (go-nvml, the library loaded at run time) or, where
// NVML cannot be loaded, by running nvidia-smi; a node with neither has no
// GPUs, which is not an error.
package gpu

import (
	"context"
	"errors"
	"fmt"
	"os/exec"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// Sources a Collector reads from (telemetry.NodeSample.Source).
const (
	SourceNVML = "nvml"
	SourceSMI  = "nvidia-smi"
	SourceNone = "none"
)

// Collector reads the node's GPUs. Sample may be called from one goroutine
// at a time; Close releases what Open took and is idempotent.
type Collector interface {
	// Source says where the readings come from (SourceNVML, SourceSMI, SourceNone).
	Source() string
	// Sample reads every GPU. A device whose reading fails in part is
	// returned with what could be read; err says what failed.
	Sample(ctx context.Context) ([]telemetry.GPUStat, error)
	// Close releases the collector.
	Close() error
}

// ErrUnavailable says that a source cannot be used on this node (no NVML
// library, no driver, no nvidia-smi).
var ErrUnavailable = errors.New("gpu source unavailable")

// Open returns the best collector this node has for prefer: "auto" (or "")
// tries NVML, then nvidia-smi, then settles for none; "nvml" and "nvidia-smi"
// insist on that source; "none" reads nothing. Why a source was not used is
// logged once, at info level: a node without GPUs is normal.
func Open(ctx context.Context, prefer string, log *zap.Logger) (Collector, error) {
	switch prefer {
	case "", "auto":
		c, err := OpenNVML(log)
		if err == nil {
			return c, nil
		}
		nvmlErr := err
		s, err := OpenSMI(ctx, "")
		if err == nil {
			log.Info("reading GPUs with nvidia-smi", zap.NamedError("nvml", nvmlErr))
			return s, nil
		}
		log.Info("no GPUs", zap.NamedError("nvml", nvmlErr), zap.NamedError("nvidia_smi", err))
		return None{}, nil
	case SourceNVML:
		return OpenNVML(log)
	case SourceSMI:
		return OpenSMI(ctx, "")
	case SourceNone:
		return None{}, nil
	}
	return nil, fmt.Errorf("open gpu collector: unknown source %q (use auto, nvml, nvidia-smi or none)", prefer)
}

// None is the collector of a node without GPUs: it reads nothing.
type None struct{}

// Source implements Collector.
func (None) Source() string { return SourceNone }

// Sample implements Collector: no GPUs, no error.
func (None) Sample(context.Context) ([]telemetry.GPUStat, error) { return nil, nil }

// Close implements Collector.
func (None) Close() error { return nil }

// lookSMI finds nvidia-smi on PATH.
func lookSMI(path string) (string, error) {
	if path == "" {
		path = "nvidia-smi"
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return p, nil
}

func ptr[T any](v T) *T { return &v }
