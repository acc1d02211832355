package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/telemetry"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares v, as indented JSON, with testdata/name (rewritten with -update).
func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, _ := json.MarshalIndent(v, "", "  ")
	got = append(got, '\n')
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the parse (go test -update rewrites it):\n%s", path, got)
	}
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseRecordedOutput(t *testing.T) {
	for _, tc := range []struct {
		gpus, apps string
		n          int
		procs      int
	}{
		{"h100x8.csv", "h100x8_apps.csv", 8, 4},
		{"geforce_na.csv", "geforce_na_apps.csv", 2, 2},
		{"h100x8.csv", "empty_apps.csv", 8, 0},
	} {
		t.Run(tc.gpus+"+"+tc.apps, func(t *testing.T) {
			gpus, err := ParseGPUs(readFixture(t, tc.gpus))
			if err != nil {
				t.Fatalf("ParseGPUs: %v", err)
			}
			apps, err := ParseApps(readFixture(t, tc.apps))
			if err != nil {
				t.Fatalf("ParseApps: %v", err)
			}
			AttachProcesses(gpus, apps)
			if len(gpus) != tc.n || len(apps) != tc.procs {
				t.Fatalf("%d GPUs and %d processes, want %d and %d", len(gpus), len(apps), tc.n, tc.procs)
			}
			golden(t, strings.TrimSuffix(tc.gpus, ".csv")+"+"+strings.TrimSuffix(tc.apps, ".csv")+".golden.json", gpus)
		})
	}
}

func TestParseConvertsToBaseUnits(t *testing.T) {
	gpus, err := ParseGPUs(readFixture(t, "h100x8.csv"))
	if err != nil {
		t.Fatal(err)
	}
	g := gpus[2]
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"util", *g.Utilization, 0.99},
		{"mem_util", *g.MemoryUtilization, 0.43},
		{"mem_used", float64(*g.MemoryUsedBytes), 61447 * mib},
		{"mem_total", float64(*g.MemoryTotalBytes), 81559 * mib},
		{"power", *g.PowerWatts, 655.90},
		{"power_limit", *g.PowerLimitWatts, 700},
		{"temp", *g.TemperatureCelsius, 66},
		{"sm_clock", *g.SMClockHertz, 1965e6},
		{"ecc_corrected", float64(*g.ECCCorrected), 2},
		{"ecc_uncorrected", float64(*g.ECCUncorrected), 0},
	} {
		if d := c.got - c.want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if g.Index != 2 || g.Name != "NVIDIA H100 80GB HBM3" || !strings.HasPrefix(g.UUID, "GPU-7d8c3e40") {
		t.Errorf("identity: %+v", g)
	}
}

func TestParseNotAvailableIsAbsent(t *testing.T) {
	gpus, err := ParseGPUs(readFixture(t, "geforce_na.csv"))
	if err != nil {
		t.Fatal(err)
	}
	g0, g1 := gpus[0], gpus[1]
	if g0.PowerLimitWatts != nil || g0.ECCCorrected != nil || g0.ECCUncorrected != nil {
		t.Errorf("[N/A] read as a value: %+v", g0)
	}
	if g0.PowerWatts == nil || *g0.PowerWatts != 118.54 {
		t.Errorf("power of GPU 0: %v", g0.PowerWatts)
	}
	if g1.Utilization != nil || g1.PowerWatts != nil || g1.ECCUncorrected != nil {
		t.Errorf("[N/A]/[Not Supported] read as a value: %+v", g1)
	}
	if g1.TemperatureCelsius == nil || *g1.TemperatureCelsius != 38 {
		t.Errorf("temperature of GPU 1: %v", g1.TemperatureCelsius)
	}
	apps, err := ParseApps(readFixture(t, "geforce_na_apps.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if apps[0].MemoryUsedBytes != nil || apps[1].MemoryUsedBytes == nil || *apps[1].MemoryUsedBytes != 2048*mib {
		t.Errorf("process memory: %+v %+v", apps[0], apps[1])
	}
}

func TestParseMalformedLines(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		gpus     int
		errHas   []string
	}{
		{"recorded", string(readFixture(t, "malformed.csv")), 2, []string{"line 2", "4 fields, want 13"}},
		{"bad index first", "x, GPU-1, A, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1\n", 0, []string{"line 1", "index", `"x"`}},
		{"percent sign", "0, GPU-1, A, 71%, 1, 1, 1, 1, 1, 1, 1, 1, 1\n", 1, []string{"line 1", "utilization.gpu", `"71%"`}},
		{"utilization over 100", "0, GPU-1, A, 170, 1, 1, 1, 1, 1, 1, 1, 1, 1\n", 1, []string{"utilization.gpu"}},
		{"negative power", "0, GPU-1, A, 1, 1, 1, 1, -5, 1, 1, 1, 1, 1\n", 1, []string{"power.draw"}},
		{"error text", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", 0, []string{"line 1", "fields"}},
		{"unbalanced quote", "0, \"GPU-1, A\n", 0, []string{"line 1"}},
		{"blank lines only", "\n\n", 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gpus, err := ParseGPUs([]byte(tc.in))
			if len(gpus) != tc.gpus {
				t.Errorf("%d GPUs read, want %d: %+v", len(gpus), tc.gpus, gpus)
			}
			if tc.errHas == nil {
				if err != nil {
					t.Errorf("error %v, want none", err)
				}
				return
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
	for _, tc := range []struct{ in, errHas string }{
		{"GPU-1, abc, 10\n", "pid"},
		{"GPU-1, 12, 10 MiB\n", "used_memory"},
		{"[N/A], 12, 10\n", "gpu_uuid"},
		{"GPU-1, 12\n", "2 fields, want 3"},
	} {
		if _, err := ParseApps([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("ParseApps(%q) = %v, want an error naming %s", tc.in, err, tc.errHas)
		}
	}
}

// checkParsed asserts what every parse must hold, whatever the input.
func checkParsed(t *testing.T, gpus []telemetry.GPUStat) {
	for _, g := range gpus {
		if g.Index < 0 {
			t.Fatalf("negative index %d", g.Index)
		}
		s := telemetry.NodeSample{V: telemetry.NodeSchemaVersion, Kind: telemetry.NodeGPU, Node: "n", GPUs: []telemetry.GPUStat{g}}
		s.Time = s.Time.AddDate(2026, 0, 0)
		if err := s.Validate(); err != nil {
			t.Fatalf("parsed GPU fails validation: %v (%+v)", err, g)
		}
	}
}

func FuzzParseGPUs(f *testing.F) {
	for _, name := range []string{"h100x8.csv", "geforce_na.csv", "malformed.csv"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("0, \"GPU-1\", \"a,b\", 1e309, NaN, 18446744073709551615, 1, Inf, 1, -0, 1, 1, 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		gpus, _ := ParseGPUs(b)
		checkParsed(t, gpus)
		apps, _ := ParseApps(b)
		for _, p := range apps {
			if p.PID <= 0 || p.GPU == "" {
				t.Fatalf("bad process %+v", p)
			}
		}
	})
}

// fakeSMI writes a shell script that answers like nvidia-smi from fixtures.
func fakeSMI(t *testing.T, gpus, apps string) string {
	t.Helper()
	dir := t.TempDir()
	abs := func(n string) string { p, _ := filepath.Abs(filepath.Join("testdata", n)); return p }
	script := "#!/bin/sh\ncase \"$1\" in\n" +
		"  --query-gpu=index) echo 0 ;;\n" +
		"  --query-gpu=*) cat '" + abs(gpus) + "' ;;\n" +
		"  --query-compute-apps=*) cat '" + abs(apps) + "' ;;\n" +
		"  *) echo \"unknown $1\" >&2; exit 2 ;;\nesac\n"
	p := filepath.Join(dir, "nvidia-smi")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSMICollectorRunsTheQueries(t *testing.T) {
	bin := fakeSMI(t, "h100x8.csv", "h100x8_apps.csv")
	c, err := OpenSMI(context.Background(), bin)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gpus, err := c.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.Source() != SourceSMI || len(gpus) != 8 || len(gpus[0].Processes) != 1 || gpus[0].Processes[0].PID != 48211 || len(gpus[7].Processes) != 0 {
		t.Errorf("source %s, %d GPUs, processes of GPU 0: %+v", c.Source(), len(gpus), gpus[0].Processes)
	}
}

// TestSMIFailingDeviceKeepsTheOthers: nvidia-smi prints the devices it can
// read and exits 1 for one it cannot; the others are still sampled.
func TestSMIFailingDeviceKeepsTheOthers(t *testing.T) {
	bin := fakeSMI(t, "h100x8.csv", "h100x8_apps.csv")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	failing := strings.Replace(string(b), "h100x8.csv' ;;", "h100x8.csv'; echo 'Unable to determine the device handle for GPU 0000:9A:00.0: Unknown Error' >&2; exit 1 ;;", 1)
	if err := os.WriteFile(bin, []byte(failing), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := OpenSMI(context.Background(), bin)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gpus, err := c.Sample(context.Background())
	if len(gpus) != 8 || err == nil || !strings.Contains(err.Error(), "Unknown Error") {
		t.Errorf("Sample = %d GPUs, %v; want the 8 printed and the failure", len(gpus), err)
	}
}

func TestSMIAbsentIsUnavailable(t *testing.T) {
	_, err := OpenSMI(context.Background(), filepath.Join(t.TempDir(), "nvidia-smi"))
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("OpenSMI of a missing binary: %v, want ErrUnavailable", err)
	}
}

// TestRecordedOnAGPUMachine parses what tools/gpusample -record saved in
// testdata/live, when it is there.
func TestRecordedOnAGPUMachine(t *testing.T) {
	gpusCSV, err := os.ReadFile(filepath.Join("testdata", "live", "gpus.csv"))
	if err != nil {
		t.Skip("no testdata/live/gpus.csv: record one with go run ./tools/gpusample -record telemetry/gpu/testdata/live")
	}
	gpus, err := ParseGPUs(gpusCSV)
	if err != nil || len(gpus) == 0 {
		t.Fatalf("ParseGPUs of the recorded output: %d GPUs, %v", len(gpus), err)
	}
	apps, err := os.ReadFile(filepath.Join("testdata", "live", "apps.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseApps(apps); err != nil {
		t.Errorf("ParseApps of the recorded output: %v", err)
	}
	checkParsed(t, gpus)
}
