// Command gpusample prints one reading of this machine's GPUs as JSON, from
// NVML and from nvidia-smi, and with -record DIR saves nvidia-smi's raw CSV
// (the queries the collector runs) as test fixtures. It is the check to run
// on a GPU machine:
//
//	go run ./tools/gpusample -record telemetry/gpu/testdata/live
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/gpu"
)

func main() {
	record := flag.String("record", "", "directory to save nvidia-smi's raw CSV output in")
	flag.Parse()
	if err := run(context.Background(), *record); err != nil {
		fmt.Fprintln(os.Stderr, "gpusample:", err)
		os.Exit(1)
	}
}

type reading struct {
	Source string              `json:"source"`
	GPUs   []telemetry.GPUStat `json:"gpus"`
	Error  string              `json:"error,omitempty"`
}

func run(ctx context.Context, record string) error {
	log, _ := zap.NewDevelopment()
	var out []reading
	if c, err := gpu.OpenNVML(log); err != nil {
		out = append(out, reading{Source: gpu.SourceNVML, Error: err.Error()})
	} else {
		gpus, err := c.Sample(ctx)
		out = append(out, reading{Source: gpu.SourceNVML, GPUs: gpus, Error: errText(err)})
		c.Close()
	}
	if s, err := gpu.OpenSMI(ctx, ""); err != nil {
		out = append(out, reading{Source: gpu.SourceSMI, Error: err.Error()})
	} else {
		gpus, err := s.Sample(ctx)
		out = append(out, reading{Source: gpu.SourceSMI, GPUs: gpus, Error: errText(err)})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	if record == "" {
		return nil
	}
	if err := os.MkdirAll(record, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", record, err)
	}
	for name, q := range map[string]string{
		"gpus.csv": "--query-gpu=" + strings.Join(gpu.GPUQuery, ","),
		"apps.csv": "--query-compute-apps=" + strings.Join(gpu.AppsQuery, ","),
	} {
		b, err := exec.CommandContext(ctx, "nvidia-smi", q, "--format=csv,noheader,nounits").Output()
		if err != nil {
			return fmt.Errorf("nvidia-smi %s: %w", q, err)
		}
		if err := os.WriteFile(filepath.Join(record, name), b, 0o644); err != nil {
			return fmt.Errorf("record %s: %w", name, err)
		}
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	return os.WriteFile(filepath.Join(record, "readings.json"), append(b, '\n'), 0o644)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
