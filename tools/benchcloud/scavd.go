package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/syncbuf"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// daemon is the scavd the bench drives.
type daemon struct {
	cmd   *exec.Cmd
	state string
	log   *syncbuf.Buffer
}

// startScavd starts scavd with the cloudvm launcher on a local cloud with
// the bench's catalog (six zones: each notice blocklists one, and the next
// spot instance comes from the next) and waits until it serves.
func (b *bench) startScavd(ctx context.Context) (*daemon, error) {
	return b.startScavdOn(ctx, b.state, []string{"--cloud-catalog", b.catalog}, nil)
}

// startScavdOn starts scavd with the cloudvm launcher on state with the
// cloud flags args and the environment env added, makes it the scavd the
// bench's jobs go to, and waits until it serves.
func (b *bench) startScavdOn(ctx context.Context, state string, args, env []string) (*daemon, error) {
	b.home = state
	d := &daemon{state: state, log: &syncbuf.Buffer{}}
	d.cmd = exec.Command(b.scavd, append([]string{"--state-dir", state, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--node-sample-every", "0",
		"--launcher", "cloudvm", "--cloud-notice-interval", "500ms"}, args...)...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := api.ReadDiscovery(state); err == nil {
			return d, nil
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("scavd did not start:\n%s", d.log.String())
		}
	}
}

// stop stops scavd and destroys its local cloud.
func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
	dir := filepath.Join(d.state, "cloud", "localcloud")
	if _, err := os.Stat(filepath.Join(dir, "cloud.json")); err != nil {
		return // a scavd of another provider: no local cloud of its own
	}
	if c, err := localcloud.Open(context.Background(), localcloud.Options{Logger: zap.NewNop(), Dir: dir}); err == nil {
		if err := c.Destroy(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "benchcloud: destroy the local cloud:", err)
		}
	}
}

var jobRe = regexp.MustCompile(`scavctl: job ([A-Za-z0-9_-]+):`)

// startJob starts scavctl run with args and returns it and its stderr.
func (b *bench) startJob(ctx context.Context, args ...string) (*exec.Cmd, *syncbuf.Buffer, error) {
	all := append([]string{"--state-dir", b.home, "run", "--launcher", "cloudvm", "--env", "OMP_NUM_THREADS=1"}, args...)
	cmd := exec.CommandContext(ctx, b.scavctl, all...)
	errOut := &syncbuf.Buffer{}
	cmd.Stderr = errOut
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return cmd, errOut, nil
}

// runJob runs a job to its end and returns its id.
func (b *bench) runJob(ctx context.Context, args ...string) (string, error) {
	began := time.Now()
	fmt.Fprintf(os.Stderr, "benchcloud: scavctl run %s\n", strings.Join(args, " "))
	defer func() { fmt.Fprintf(os.Stderr, "benchcloud: ... %s\n", time.Since(began).Round(time.Second)) }()
	cmd, errOut, err := b.startJob(ctx, args...)
	if err != nil {
		return "", err
	}
	if err := cmd.Wait(); err != nil {
		return "", fmt.Errorf("scavctl run %s: %w\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return jobID(errOut)
}

func jobID(errOut *syncbuf.Buffer) (string, error) {
	out := errOut.String()
	m := jobRe.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("no job id yet in: %s", out)
	}
	return m[1], nil
}

// job reads a job's record.
func (b *bench) job(id string) (api.Job, error) {
	out, err := exec.Command(b.scavctl, "--state-dir", b.home, "status", id, "-o", "json").Output()
	if err != nil {
		return api.Job{}, fmt.Errorf("status %s: %w", id, err)
	}
	var st struct {
		Job api.Job `json:"job"`
	}
	return st.Job, json.Unmarshal(out, &st)
}

// steps reads a job's step records.
func (b *bench) steps(id string) ([]telemetry.StepRecord, error) {
	out, err := exec.Command(b.scavctl, "--state-dir", b.home, "steps", id, "-o", "json").Output()
	if err != nil {
		return nil, fmt.Errorf("steps %s: %w", id, err)
	}
	var recs []telemetry.StepRecord
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var r telemetry.StepRecord
		if err := dec.Decode(&r); err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// firstStep is when rank 0 of attempt finished its first step (zero: none).
func firstStep(recs []telemetry.StepRecord, attempt int) time.Time {
	var first time.Time
	for _, r := range recs {
		t := time.Unix(0, int64(r.Time*1e9))
		if r.Rank == 0 && r.Attempt == attempt && r.IsStep() && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first
}
