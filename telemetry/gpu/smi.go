package gpu

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// GPUQuery is the field list SMI asks nvidia-smi --query-gpu for, in the
// order ParseGPUs reads the columns.
var GPUQuery = []string{
	"index", "uuid", "name", "utilization.gpu", "utilization.memory", "memory.used", "memory.total",
	"power.draw", "power.limit", "temperature.gpu", "clocks.sm",
	"ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
}

// AppsQuery is the field list SMI asks nvidia-smi --query-compute-apps for.
var AppsQuery = []string{"gpu_uuid", "pid", "used_memory"}

const mib = 1 << 20

// SMI reads GPUs by running nvidia-smi (CSV, no header, no units).
type SMI struct {
	bin     string
	timeout time.Duration
}

// OpenSMI finds nvidia-smi (bin, or on PATH when empty) and checks that it
// can list GPUs; ErrUnavailable when it cannot.
func OpenSMI(ctx context.Context, bin string) (*SMI, error) {
	p, err := lookSMI(bin)
	if err != nil {
		return nil, err
	}
	s := &SMI{bin: p, timeout: 10 * time.Second}
	if _, err := s.run(ctx, "--query-gpu=index", "--format=csv,noheader,nounits"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return s, nil
}

// Source implements Collector.
func (*SMI) Source() string { return SourceSMI }

// Close implements Collector.
func (*SMI) Close() error { return nil }

// Sample implements Collector: one nvidia-smi for the GPUs, one for their processes.
func (s *SMI) Sample(ctx context.Context) ([]telemetry.GPUStat, error) {
	out, runErr := s.run(ctx, "--query-gpu="+strings.Join(GPUQuery, ","), "--format=csv,noheader,nounits")
	if len(out) == 0 {
		return nil, runErr
	}
	gpus, err := ParseGPUs(out) // what a failing nvidia-smi printed still counts
	if err = errors.Join(runErr, err); err != nil {
		return gpus, err
	}
	apps, err := s.run(ctx, "--query-compute-apps="+strings.Join(AppsQuery, ","), "--format=csv,noheader,nounits")
	if err != nil {
		return gpus, err
	}
	procs, err := ParseApps(apps)
	AttachProcesses(gpus, procs)
	return gpus, err
}

func (s *SMI) run(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		// nvidia-smi exits non-zero when one device cannot be read, after
		// printing the others: those are still worth reading.
		return out, fmt.Errorf("run %s %s: %w: %s", s.bin, args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// ParseError says which line of nvidia-smi's output could not be read and why.
type ParseError struct {
	Line   int
	Column string
	Err    error
}

// Error implements error.
func (e *ParseError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("nvidia-smi output line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("nvidia-smi output line %d, %s: %v", e.Line, e.Column, e.Err)
}

// Unwrap returns the cause.
func (e *ParseError) Unwrap() error { return e.Err }

// ParseGPUs reads the output of nvidia-smi --query-gpu=<GPUQuery>
// --format=csv,noheader,nounits: one line per GPU. "[N/A]", "[Not
// Supported]" and other bracketed values read as absent. Lines that cannot be
// read are skipped; the first such problem is returned (a *ParseError) with
// the GPUs that could be read.
func ParseGPUs(out []byte) ([]telemetry.GPUStat, error) {
	var gpus []telemetry.GPUStat
	var first error
	err := eachRecord(out, len(GPUQuery), func(line int, f []string) error {
		g, ok, err := parseGPU(f)
		if ok {
			gpus = append(gpus, g) // a bad reading is left absent; the device stays
		}
		if pe := (*ParseError)(nil); errors.As(err, &pe) {
			pe.Line = line
		}
		return err
	}, &first)
	if err != nil {
		return gpus, err
	}
	return gpus, first
}

// parseGPU reads one line's fields; ok is false when the line names no
// device (its index is unreadable), err reports the first unreadable field.
func parseGPU(f []string) (g telemetry.GPUStat, ok bool, err error) {
	idx, err := strconv.Atoi(f[0])
	if err != nil || idx < 0 {
		return g, false, &ParseError{Column: "index", Err: fmt.Errorf("%q is not a device index", f[0])}
	}
	g.Index, g.UUID, g.Name = idx, value(f[1]), value(f[2])
	var errs []error
	num := func(i int, scale, hi float64) *float64 {
		s := value(f[i])
		if s == "" {
			return nil
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v < 0 || v > hi || v != v {
			errs = append(errs, &ParseError{Column: GPUQuery[i], Err: fmt.Errorf("%q is not a number in range", f[i])})
			return nil
		}
		return ptr(v * scale)
	}
	count := func(i int, scale uint64) *uint64 {
		s := value(f[i])
		if s == "" {
			return nil
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil || v > (1<<64-1)/scale {
			errs = append(errs, &ParseError{Column: GPUQuery[i], Err: fmt.Errorf("%q is not a count", f[i])})
			return nil
		}
		return ptr(v * scale)
	}
	const big = 1e12
	g.Utilization = num(3, 0.01, 100)
	g.MemoryUtilization = num(4, 0.01, 100)
	g.MemoryUsedBytes = count(5, mib)
	g.MemoryTotalBytes = count(6, mib)
	g.PowerWatts = num(7, 1, big)
	g.PowerLimitWatts = num(8, 1, big)
	g.TemperatureCelsius = num(9, 1, 1000)
	g.SMClockHertz = num(10, 1e6, 1e6)
	g.ECCCorrected = count(11, 1)
	g.ECCUncorrected = count(12, 1)
	if len(errs) > 0 {
		return g, true, errs[0]
	}
	return g, true, nil
}

// GPUProcess is a compute process as nvidia-smi lists it, with its device's UUID.
type GPUProcess struct {
	GPU string
	telemetry.GPUProcess
}

// ParseApps reads the output of nvidia-smi --query-compute-apps=<AppsQuery>
// --format=csv,noheader,nounits. Empty output (no processes) is no error;
// bad lines are skipped and the first problem returned.
func ParseApps(out []byte) ([]GPUProcess, error) {
	var ps []GPUProcess
	var first error
	err := eachRecord(out, len(AppsQuery), func(line int, f []string) error {
		uuid := value(f[0])
		if uuid == "" {
			return &ParseError{Line: line, Column: "gpu_uuid", Err: fmt.Errorf("no device UUID")}
		}
		pid, err := strconv.Atoi(f[1])
		if err != nil || pid <= 0 {
			return &ParseError{Line: line, Column: "pid", Err: fmt.Errorf("%q is not a process id", f[1])}
		}
		p := GPUProcess{GPU: uuid, GPUProcess: telemetry.GPUProcess{PID: pid}}
		if s := value(f[2]); s != "" {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil || v > (1<<64-1)/mib {
				return &ParseError{Line: line, Column: "used_memory", Err: fmt.Errorf("%q is not a size in MiB", f[2])}
			}
			p.MemoryUsedBytes = ptr(v * mib)
		}
		ps = append(ps, p)
		return nil
	}, &first)
	if err != nil {
		return ps, err
	}
	return ps, first
}

// AttachProcesses puts each process on its GPU (by UUID).
func AttachProcesses(gpus []telemetry.GPUStat, procs []GPUProcess) {
	for _, p := range procs {
		for i := range gpus {
			if gpus[i].UUID == p.GPU {
				gpus[i].Processes = append(gpus[i].Processes, p.GPUProcess)
				break
			}
		}
	}
}

// eachRecord calls fn with each non-blank CSV line's fields (want of them,
// spaces trimmed). A line with another number of fields, or one fn rejects,
// is skipped and its error kept in *first; an unreadable CSV stops it.
func eachRecord(out []byte, want int, fn func(line int, f []string) error, first *error) error {
	r := csv.NewReader(bytes.NewReader(out))
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	r.LazyQuotes = true
	r.ReuseRecord = true
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		line, _ := r.FieldPos(0)
		if err != nil {
			return &ParseError{Line: line, Err: err}
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		if len(rec) != want {
			if *first == nil {
				*first = &ParseError{Line: line, Err: fmt.Errorf("%d fields, want %d", len(rec), want)}
			}
			continue
		}
		for i := range rec {
			rec[i] = strings.TrimSpace(rec[i])
		}
		if err := fn(line, rec); err != nil && *first == nil {
			*first = err
		}
	}
}

// value is a field's text, or "" for nvidia-smi's bracketed non-values
// ("[N/A]", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]")
// and a bare "N/A".
func value(s string) string {
	s = strings.TrimSpace(s)
	if s == "N/A" || strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		return ""
	}
	return s
}
