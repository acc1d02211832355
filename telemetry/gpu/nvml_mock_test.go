//go:build linux && cgo

package gpu

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// mockDevice is a device answering every reading the collector makes.
func mockDevice(uuid string, util uint32, procs []nvml.ProcessInfo) *mock.Device {
	return &mock.Device{
		GetUUIDFunc:             func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetNameFunc:             func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS },
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: util, Memory: 40}, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 80 << 30, Used: 60 << 30, Free: 20 << 30}, nvml.SUCCESS
		},
		GetPowerUsageFunc:         func() (uint32, nvml.Return) { return 612470, nvml.SUCCESS },
		GetEnforcedPowerLimitFunc: func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS },
		GetTemperatureFunc: func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
			return 63, map[bool]nvml.Return{true: nvml.SUCCESS, false: nvml.ERROR_INVALID_ARGUMENT}[s == nvml.TEMPERATURE_GPU]
		},
		GetClockInfoFunc: func(c nvml.ClockType) (uint32, nvml.Return) {
			return 1980, map[bool]nvml.Return{true: nvml.SUCCESS, false: nvml.ERROR_INVALID_ARGUMENT}[c == nvml.CLOCK_SM]
		},
		GetTotalEccErrorsFunc: func(t nvml.MemoryErrorType, _ nvml.EccCounterType) (uint64, nvml.Return) {
			if t == nvml.MEMORY_ERROR_TYPE_CORRECTED {
				return 3, nvml.SUCCESS
			}
			return 0, nvml.SUCCESS
		},
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS },
		GetSupportedEventTypesFunc:     func() (uint64, nvml.Return) { return nvml.EventTypeXidCriticalError, nvml.SUCCESS },
		RegisterEventsFunc:             func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS },
	}
}

func TestNVMLReadsEveryDevice(t *testing.T) {
	d0 := mockDevice("GPU-aaaa", 97, []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 1 << 30}, {Pid: 4343, UsedGpuMemory: ^uint64(0)}})
	d1 := mockDevice("GPU-bbbb", 0, nil)
	// A consumer card: no ECC, no power reading; a lost one would fail loudly.
	d1.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	d1.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
	events := make(chan nvml.EventData, 1)
	events <- nvml.EventData{Device: d1, EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	es := &mock.EventSet{
		WaitFunc: func(timeout uint32) (nvml.EventData, nvml.Return) {
			select {
			case e := <-events:
				return e, nvml.SUCCESS
			case <-time.After(10 * time.Millisecond):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	devs := []nvml.Device{d0, d1}
	lib := &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS },
		EventSetCreateFunc:         func() (nvml.EventSet, nvml.Return) { return es, nvml.SUCCESS },
	}
	c, err := openNVML(lib, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	// The XID event is counted by the collector's goroutine.
	var gpus []telemetry.GPUStat
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		gpus, err = c.Sample(context.Background())
		if len(gpus) == 2 && gpus[1].XIDErrors != nil && *gpus[1].XIDErrors == 1 || time.Now().After(deadline) {
			break
		}
	}
	if !IsNVMLReturn(err, nvml.ERROR_GPU_IS_LOST) {
		t.Errorf("error %v, want the lost GPU's", err)
	}
	g0, g1 := gpus[0], gpus[1]
	if *g0.Utilization != 0.97 || *g0.MemoryUtilization != 0.40 || *g0.MemoryUsedBytes != 60<<30 || *g0.MemoryTotalBytes != 80<<30 ||
		*g0.PowerWatts != 612.47 || *g0.PowerLimitWatts != 700 || *g0.TemperatureCelsius != 63 || *g0.SMClockHertz != 1980e6 ||
		*g0.ECCCorrected != 3 || *g0.ECCUncorrected != 0 || g0.UUID != "GPU-aaaa" || g0.Name == "" {
		t.Errorf("GPU 0 read as %+v", g0)
	}
	if len(g0.Processes) != 2 || g0.Processes[0].PID != 4242 || *g0.Processes[0].MemoryUsedBytes != 1<<30 || g0.Processes[1].MemoryUsedBytes != nil {
		t.Errorf("GPU 0 processes %+v", g0.Processes)
	}
	if g1.ECCCorrected != nil || g1.PowerWatts != nil || g1.Utilization == nil || *g1.Utilization != 0 {
		t.Errorf("GPU 1 read as %+v", g1)
	}
	if g1.XIDErrors == nil || *g1.XIDErrors != 1 || *g1.LastXID != 79 || *g0.XIDErrors != 0 || g0.LastXID != nil {
		t.Errorf("xids: GPU 0 %v, GPU 1 %v (last %v)", g0.XIDErrors, g1.XIDErrors, g1.LastXID)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if len(lib.ShutdownCalls()) != 1 || len(es.FreeCalls()) != 1 {
		t.Errorf("Shutdown called %d times, Free %d, want once each", len(lib.ShutdownCalls()), len(es.FreeCalls()))
	}
}
