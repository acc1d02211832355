package gpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// On this machine there is no driver: NVML is unavailable, Open settles for
// "no GPUs" with one info line, and sampling reads nothing, without error.
func TestNoDriverMeansNoGPUs(t *testing.T) {
	c, err := OpenNVML(zap.NewNop())
	if err == nil {
		c.Close()
		t.Skip("this machine has NVML")
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("OpenNVML without a driver: %v, want ErrUnavailable", err)
	}
	t.Setenv("PATH", t.TempDir()) // and no nvidia-smi
	core, logs := observer.New(zapcore.DebugLevel)
	col, err := Open(context.Background(), "auto", zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	for i := 0; i < 3; i++ {
		gpus, err := col.Sample(context.Background())
		if gpus != nil || err != nil {
			t.Fatalf("sample %d: %v, %v; want no GPUs and no error", i, gpus, err)
		}
	}
	if col.Source() != SourceNone || logs.Len() != 1 || logs.All()[0].Level != zapcore.InfoLevel {
		t.Errorf("source %s; log %v, want one info line", col.Source(), logs.All())
	}
	if _, err := Open(context.Background(), "nvml", zap.NewNop()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("insisting on NVML: %v, want ErrUnavailable", err)
	}
	if _, err := Open(context.Background(), "cuda", zap.NewNop()); err == nil {
		t.Error("an unknown source was accepted")
	}
}

func TestAutoFallsBackToNvidiaSMI(t *testing.T) {
	if c, err := OpenNVML(zap.NewNop()); err == nil {
		c.Close()
		t.Skip("this machine has NVML")
	}
	bin := fakeSMI(t, "geforce_na.csv", "empty_apps.csv")
	t.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	c, err := Open(context.Background(), "auto", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if gpus, err := c.Sample(context.Background()); c.Source() != SourceSMI || len(gpus) != 2 || err != nil {
		t.Errorf("source %s: %d GPUs, %v", c.Source(), len(gpus), err)
	}
}

// TestLiveGPU runs only where SCAV_TEST_GPU=1 (a machine with an NVIDIA
// driver): NVML must open and read every device, and agree with nvidia-smi
// on the devices and their memory.
func TestLiveGPU(t *testing.T) {
	if os.Getenv("SCAV_TEST_GPU") != "1" {
		t.Skip("set SCAV_TEST_GPU=1 on a machine with an NVIDIA GPU")
	}
	c, err := OpenNVML(zap.NewNop())
	if err != nil {
		t.Fatalf("open NVML: %v", err)
	}
	defer c.Close()
	gpus, err := c.Sample(context.Background())
	if err != nil {
		t.Errorf("NVML sample: %v", err)
	}
	if len(gpus) == 0 {
		t.Fatal("NVML sees no GPU")
	}
	for _, g := range gpus {
		if g.UUID == "" || g.Name == "" || g.Utilization == nil || g.MemoryTotalBytes == nil || g.MemoryUsedBytes == nil ||
			g.PowerWatts == nil || g.TemperatureCelsius == nil || g.SMClockHertz == nil {
			t.Errorf("GPU %d lacks a basic reading: %+v", g.Index, g)
		}
	}
	s, err := OpenSMI(context.Background(), "")
	if err != nil {
		t.Skipf("no nvidia-smi to compare with: %v", err)
	}
	sg, err := s.Sample(context.Background())
	if err != nil {
		t.Errorf("nvidia-smi sample: %v", err)
	}
	if len(sg) != len(gpus) {
		t.Fatalf("nvidia-smi sees %d GPUs, NVML %d", len(sg), len(gpus))
	}
	for i := range gpus {
		a, b := gpus[i], sg[i]
		if a.UUID != b.UUID || b.MemoryTotalBytes == nil || *a.MemoryTotalBytes/mib != *b.MemoryTotalBytes/mib {
			t.Errorf("GPU %d: NVML %s %v bytes, nvidia-smi %s %v", i, a.UUID, *a.MemoryTotalBytes, b.UUID, b.MemoryTotalBytes)
		}
	}
}
