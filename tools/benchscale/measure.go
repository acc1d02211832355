package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
)

// ctl runs scavctl commands against one daemon's state directory.
type ctl struct {
	bin, state string
}

// run runs scavctl with args once, its output thrown away, and returns how
// long it took from exec to exit.
func (c ctl) run(args ...string) (time.Duration, error) {
	cmd := exec.Command(c.bin, append([]string{"--state-dir", c.state}, args...)...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	cmd.Stdout = devnull
	began := time.Now()
	err = cmd.Run()
	took := time.Since(began)
	if err != nil {
		return took, fmt.Errorf("scavctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return took, nil
}

// median runs scavctl with args once to warm up, then runs times more (a
// quick command more: up to maxRuns while they take less than quickTotal)
// and returns the median; a command this build does not know is an error.
func (c ctl) median(runs int, args ...string) (time.Duration, error) {
	if _, err := c.run(args...); err != nil {
		return 0, err
	}
	var ds []time.Duration
	var total time.Duration
	for len(ds) < runs || len(ds) < maxRuns && total < quickTotal {
		d, err := c.run(args...)
		if err != nil {
			return 0, err
		}
		ds = append(ds, d)
		total += d
	}
	return quantile(ds, 0.5), nil
}

// A quick command is run up to maxRuns times while its runs take less
// than quickTotal in all: its median is then less at the mercy of a busy
// moment of the machine.
const (
	maxRuns    = 15
	quickTotal = 3 * time.Second
)

// quantile is the q-quantile of ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// sample runs scavctl with args n times and returns the times.
func (c ctl) sample(n int, args ...string) ([]time.Duration, error) {
	var ds []time.Duration
	for i := 0; i < n; i++ {
		d, err := c.run(args...)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// stepper is a worker that reports a step every tenth of a second for the
// given number of seconds, through the python client.
const stepper = `import sys, time
import scavenger
end = time.time() + float(sys.argv[1])
step = 0
while time.time() < end:
    time.sleep(0.1)
    step += 1
    scavenger.step(samples=8, loss=1.0 / step)
scavenger.close()
`

// runJobs submits n jobs of one worker each that report 10 steps a second
// for secs seconds, and waits until each has started.
func runJobs(ctx context.Context, d *scavd, python, dir string, n int, secs float64) error {
	script := filepath.Join(dir, "stepper.py")
	if err := os.WriteFile(script, []byte(stepper), 0o644); err != nil {
		return err
	}
	c, err := api.Dial(ctx, filepath.Join(d.state, api.SocketName), 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	env := append(os.Environ(), "OMP_NUM_THREADS=1")
	var ids []string
	for i := 0; i < n; i++ {
		j, err := c.Run(ctx, api.RunRequest{Name: fmt.Sprintf("running%d", i), Command: []string{python, script, fmt.Sprint(secs)},
			Dir: dir, Env: env, Config: plugins.Config{Workers: 1, GlobalBatch: 8}})
		if err != nil {
			return fmt.Errorf("submit job %d: %w", i, err)
		}
		ids = append(ids, j.ID)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		running := 0
		for _, id := range ids {
			if last, ok, _ := c.LastStep(ctx, id); ok && last.Step > 0 {
				running++
			}
		}
		if running == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d jobs reported a step after a minute", running, n)
		}
	}
}

// waitIdle waits until the daemon runs no job.
func waitIdle(ctx context.Context, d *scavd) error {
	c, err := api.Dial(ctx, filepath.Join(d.state, api.SocketName), 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		i, err := c.Ping(ctx)
		if err == nil && len(i.Active) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jobs still running after 2 minutes: %v", i.Active)
		}
	}
}
