// Command benchapi measures how long `scavctl jobs` takes against a running
// scavd: it starts the given scavd on a fresh state directory, submits a
// few short jobs through the given scavctl, then runs `scavctl jobs` n times
// and prints the median and 90th percentile as a markdown table row. It
// only runs the binaries, so it measures any version of them the same way.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchapi:", err)
		os.Exit(1)
	}
}

func run() error {
	scavd := flag.String("scavd", "bin/scavd", "scavd binary")
	scavctl := flag.String("scavctl", "bin/scavctl", "scavctl binary")
	label := flag.String("label", "this build", "the row's label")
	n := flag.Int("n", 100, "runs of scavctl jobs")
	flag.Parse()
	state, err := os.MkdirTemp("", "benchapi-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	d := exec.Command(*scavd, "--state-dir", state, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--node-sample-every", "0", "--log-level", "warn")
	d.Stderr = os.Stderr
	if err := d.Start(); err != nil {
		return fmt.Errorf("start %s: %w", *scavd, err)
	}
	defer func() {
		_ = d.Process.Signal(syscall.SIGTERM)
		_ = d.Wait()
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(state, "scavd.json")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("scavd did not come up")
		}
	}
	ctl := func(args ...string) error {
		out, err := exec.Command(*scavctl, append([]string{"--state-dir", state}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("scavctl %v: %w\n%s", args, err, out)
		}
		return nil
	}
	for i := 0; i < 5; i++ {
		if err := ctl("run", "--", "/bin/true"); err != nil {
			return err
		}
	}
	var ds []time.Duration
	for i := 0; i < *n; i++ {
		t := time.Now()
		if err := ctl("jobs"); err != nil {
			return err
		}
		ds = append(ds, time.Since(t))
	}
	sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Printf("| %s | %d | %.1f | %.1f |\n", *label, *n, ms(ds[len(ds)/2]), ms(ds[len(ds)*9/10]))
	return nil
}
