//go:build linux && cgo

package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// NVML reads GPUs through the NVIDIA Management Library, loaded at run time
// (libnvidia-ml.so.1): nothing of it is needed to build or to start on a node
// without a driver. It follows critical XID events in a goroutine of its own,
// which Close stops and joins.
type NVML struct {
	lib nvml.Interface
	log *zap.Logger

	mu   sync.Mutex
	xids map[string]xidCount // by device UUID

	es      nvml.EventSet
	stop    chan struct{}
	wg      sync.WaitGroup
	closeMu sync.Once
	closed  error
}

type xidCount struct{ n, last uint64 }

// OpenNVML loads and initialises NVML; on a node without the library or the
// driver it returns an error wrapping ErrUnavailable.
func OpenNVML(log *zap.Logger) (*NVML, error) {
	return openNVML(nvml.New(), log)
}

// openNVML opens a collector on lib (a real library or a mock).
func openNVML(lib nvml.Interface, log *zap.Logger) (*NVML, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		err := nvmlError("init nvml", ret, lib)
		switch ret {
		case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_NO_PERMISSION, nvml.ERROR_FUNCTION_NOT_FOUND:
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil, err
	}
	c := &NVML{lib: lib, log: log, xids: map[string]xidCount{}, stop: make(chan struct{})}
	c.followXIDs()
	return c, nil
}

// Source implements Collector.
func (*NVML) Source() string { return SourceNVML }

// Sample implements Collector. Readings a device does not support are left
// absent; other failures are returned (the first of them) with the rest.
func (c *NVML) Sample(ctx context.Context) ([]telemetry.GPUStat, error) {
	n, ret := c.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nvmlError("count devices", ret, c.lib)
	}
	var errs []error
	gpus := make([]telemetry.GPUStat, 0, n)
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return gpus, err
		}
		d, ret := c.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			errs = append(errs, nvmlError(fmt.Sprintf("device %d", i), ret, c.lib))
			continue
		}
		g, err := c.device(i, d)
		if err != nil {
			errs = append(errs, err)
		}
		gpus = append(gpus, g)
	}
	if len(errs) > 0 {
		return gpus, errs[0]
	}
	return gpus, nil
}

// device reads one device; err is its first failure other than "not supported".
func (c *NVML) device(i int, d nvml.Device) (telemetry.GPUStat, error) {
	g := telemetry.GPUStat{Index: i}
	var first error
	ok := func(what string, ret nvml.Return) bool {
		switch ret {
		case nvml.SUCCESS:
			return true
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_FOUND, nvml.ERROR_NO_DATA:
		default:
			if first == nil {
				first = nvmlError(fmt.Sprintf("device %d: %s", i, what), ret, c.lib)
			}
		}
		return false
	}
	if s, ret := d.GetUUID(); ok("uuid", ret) {
		g.UUID = s
	}
	if s, ret := d.GetName(); ok("name", ret) {
		g.Name = s
	}
	if u, ret := d.GetUtilizationRates(); ok("utilization", ret) {
		g.Utilization, g.MemoryUtilization = ptr(float64(u.Gpu)/100), ptr(float64(u.Memory)/100)
	}
	if m, ret := d.GetMemoryInfo(); ok("memory", ret) {
		g.MemoryUsedBytes, g.MemoryTotalBytes = ptr(m.Used), ptr(m.Total)
	}
	if mw, ret := d.GetPowerUsage(); ok("power", ret) {
		g.PowerWatts = ptr(float64(mw) / 1000)
	}
	if mw, ret := d.GetEnforcedPowerLimit(); ok("power limit", ret) {
		g.PowerLimitWatts = ptr(float64(mw) / 1000)
	}
	if t, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ok("temperature", ret) {
		g.TemperatureCelsius = ptr(float64(t))
	}
	if mhz, ret := d.GetClockInfo(nvml.CLOCK_SM); ok("sm clock", ret) {
		g.SMClockHertz = ptr(float64(mhz) * 1e6)
	}
	if n, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC); ok("ecc corrected", ret) {
		g.ECCCorrected = ptr(n)
	}
	if n, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ok("ecc uncorrected", ret) {
		g.ECCUncorrected = ptr(n)
	}
	if ps, ret := d.GetComputeRunningProcesses(); ok("processes", ret) {
		for _, p := range ps {
			gp := telemetry.GPUProcess{PID: int(p.Pid)}
			if p.UsedGpuMemory != ^uint64(0) { // NVML_VALUE_NOT_AVAILABLE
				gp.MemoryUsedBytes = ptr(p.UsedGpuMemory)
			}
			g.Processes = append(g.Processes, gp)
		}
	}
	c.mu.Lock()
	if x, watched := c.xids[g.UUID]; watched && g.UUID != "" {
		g.XIDErrors = ptr(x.n)
		if x.n > 0 {
			g.LastXID = ptr(x.last)
		}
	}
	c.mu.Unlock()
	return g, first
}

// followXIDs registers every device that supports it for critical XID events
// and counts them in a goroutine until Close. Where events are not supported
// (no device supports them, or the mock has none) XIDErrors stays absent.
func (c *NVML) followXIDs() {
	es, ret := c.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		c.log.Debug("xid events unavailable", zap.Stringer("nvml", ret))
		return
	}
	n, ret := c.lib.DeviceGetCount()
	registered := 0
	for i := 0; ret == nvml.SUCCESS && i < n; i++ {
		d, r := c.lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			continue
		}
		uuid, r := d.GetUUID()
		if r != nvml.SUCCESS {
			continue
		}
		if types, r := d.GetSupportedEventTypes(); r != nvml.SUCCESS || types&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		if r := d.RegisterEvents(nvml.EventTypeXidCriticalError, es); r != nvml.SUCCESS {
			c.log.Debug("register xid events", zap.Int("device", i), zap.Stringer("nvml", r))
			continue
		}
		c.xids[uuid] = xidCount{}
		registered++
	}
	if registered == 0 {
		es.Free()
		return
	}
	c.es = es
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			select {
			case <-c.stop:
				return
			default:
			}
			e, ret := es.Wait(1000) // milliseconds: the stop is seen within a second
			if ret != nvml.SUCCESS && ret != nvml.ERROR_TIMEOUT {
				// A lost GPU answers at once, every time: wait before asking again.
				select {
				case <-c.stop:
					return
				case <-time.After(time.Second):
				}
				continue
			}
			if ret != nvml.SUCCESS || e.EventType&nvml.EventTypeXidCriticalError == 0 || e.Device == nil {
				continue
			}
			uuid, r := e.Device.GetUUID()
			if r != nvml.SUCCESS {
				continue
			}
			c.mu.Lock()
			x := c.xids[uuid]
			x.n++
			x.last = e.EventData
			c.xids[uuid] = x
			c.mu.Unlock()
			c.log.Warn("gpu xid error", zap.String("gpu", uuid), zap.Uint64("xid", e.EventData))
		}
	}()
}

// Close stops following XID events and shuts NVML down. It is idempotent.
func (c *NVML) Close() error {
	c.closeMu.Do(func() {
		close(c.stop)
		c.wg.Wait()
		if c.es != nil {
			c.es.Free()
		}
		if ret := c.lib.Shutdown(); ret != nvml.SUCCESS {
			c.closed = nvmlError("shut nvml down", ret, c.lib)
		}
	})
	return c.closed
}

// NVMLReturnError is an NVML call's failure.
type NVMLReturnError struct {
	Op  string
	Ret nvml.Return
	Msg string
}

// Error implements error.
func (e *NVMLReturnError) Error() string { return fmt.Sprintf("%s: %s", e.Op, e.Msg) }

// nvmlError names a failed call. Return.Error works without the library
// (it falls back to the code's name), so this is safe before Init succeeds.
func nvmlError(op string, ret nvml.Return, _ nvml.Interface) error {
	return &NVMLReturnError{Op: op, Ret: ret, Msg: ret.Error()}
}

// IsNVMLReturn reports whether err is an NVML failure with ret.
func IsNVMLReturn(err error, ret nvml.Return) bool {
	var e *NVMLReturnError
	return errors.As(err, &e) && e.Ret == ret
}
