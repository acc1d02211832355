// Command benchtelemetry measures what Scavenger's step telemetry costs a
// training job: it runs the instrumented CNN example (examples/cnn.py) and the
// same model and batches without instrumentation (examples/plain_ddp.py) under
// `scavctl run`, alternating, and compares their median step times.
//
//	go run ./tools/benchtelemetry --scavctl bin/scavctl [--rounds 7] [--steps 300]
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchtelemetry:", err)
		os.Exit(1)
	}
}

func run() error {
	scavctl := flag.String("scavctl", "bin/scavctl", "scavctl binary")
	python := flag.String("python", "/usr/bin/python3", "python with torch")
	rounds := flag.Int("rounds", 7, "pairs of runs (instrumented, plain), alternating")
	steps := flag.Int("steps", 300, "steps per run")
	workers := flag.Int("workers", 2, "workers per run")
	batch := flag.Int("batch-size", 64, "global batch size")
	flag.Parse()

	state, err := os.MkdirTemp("", "benchtelemetry-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)

	scripts := []string{"examples/cnn.py", "examples/plain_ddp.py"}
	medians := map[string][]float64{}
	fmt.Printf("| round | instrumented median step (ms) | plain median step (ms) | ratio |\n|---|---|---|---|\n")
	for r := 1; r <= *rounds; r++ {
		order := scripts
		if r%2 == 0 { // alternate which goes first, so drift hits both alike
			order = []string{scripts[1], scripts[0]}
		}
		got := map[string]float64{}
		for _, s := range order {
			m, err := medianStep(*scavctl, state, *python, s, *workers, *batch, *steps)
			if err != nil {
				return err
			}
			got[s] = m
			medians[s] = append(medians[s], m)
		}
		fmt.Printf("| %d | %.3f | %.3f | %.4f |\n", r, got[scripts[0]]*1e3, got[scripts[1]]*1e3, got[scripts[0]]/got[scripts[1]])
	}
	inst, plain := median(medians[scripts[0]]), median(medians[scripts[1]])
	fmt.Printf("| **median of rounds** | **%.3f** | **%.3f** | **%.4f** |\n", inst*1e3, plain*1e3, inst/plain)
	fmt.Printf("\nCNN, %d workers (gloo, CPU), global batch %d, %d steps per run; ratio goal <= 1.005.\n", *workers, *batch, *steps)
	return nil
}

// medianStep runs one script under scavctl and returns the median step time
// the script reports in its summary line.
func medianStep(scavctl, state, python, script string, workers, batch, steps int) (float64, error) {
	cmd := exec.Command(scavctl, "--state-dir", state, "run", "--workers", strconv.Itoa(workers),
		"--batch-size", strconv.Itoa(batch), "--", python, script, "--steps", strconv.Itoa(steps))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("run %s: %w\n%s", script, err, errOut.String())
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, `{"event": "summary"`)
		if i < 0 {
			continue
		}
		var s struct {
			Median float64 `json:"median_step_s"`
		}
		if err := json.Unmarshal([]byte(line[i:]), &s); err != nil {
			return 0, fmt.Errorf("decode summary of %s: %w", script, err)
		}
		return s.Median, nil
	}
	return 0, fmt.Errorf("%s printed no summary line:\n%s", script, out.String())
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else if n > 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return 0
}
