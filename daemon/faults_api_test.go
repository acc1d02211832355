package daemon

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/report"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// apiRead is one kind of read a user makes through the API (the scavctl
// command that makes it in the comment), of job id.
type apiRead struct {
	name string
	call func(ctx context.Context, c *api.Client, id string) error
}

// errFirstFrame ends a follow at its first frame.
var errFirstFrame = errors.New("first frame")

// apiReads are the reads of readersTrial.
var apiReads = []apiRead{
	{"jobs", func(ctx context.Context, c *api.Client, _ string) error { // scavctl jobs
		_, err := c.Jobs(ctx)
		return err
	}},
	{"status", func(ctx context.Context, c *api.Client, id string) error { // scavctl status ID
		if _, err := c.Job(ctx, id); err != nil {
			return err
		}
		_, _, err := c.LastStep(ctx, id)
		return err
	}},
	{"logs", func(ctx context.Context, c *api.Client, id string) error { // scavctl logs ID
		return c.Output(ctx, id, false, func(*telemetry.LogLine, *telemetry.Event) error { return nil })
	}},
	{"logs -f", func(ctx context.Context, c *api.Client, id string) error { // scavctl logs -f ID, up to its first frame
		if err := c.Output(ctx, id, true, func(*telemetry.LogLine, *telemetry.Event) error { return errFirstFrame }); !errors.Is(err, errFirstFrame) {
			return fmt.Errorf("follow the output of %s: %w", id, err)
		}
		return nil
	}},
	{"steps", func(ctx context.Context, c *api.Client, id string) error { // scavctl logs --steps ID
		return c.Steps(ctx, id, false, func(telemetry.StepRecord) error { return nil })
	}},
	{"report", func(ctx context.Context, c *api.Client, id string) error { // scavctl report ID (its buildReport)
		j, err := c.Job(ctx, id)
		if err != nil {
			return err
		}
		var recs []telemetry.StepRecord
		if err := c.Steps(ctx, id, false, func(r telemetry.StepRecord) error {
			if r.Rank == 0 && r.IsStep() {
				recs = append(recs, r)
			}
			return nil
		}); err != nil {
			return err
		}
		_ = report.Make(j, recs, time.Now())
		return nil
	}},
}

// readersTrial runs 4 jobs (faultWorker, 2 ranks each) under 8 readers that
// read what users read through the API, each with its own client, in a loop
// until the jobs end: the jobs are sized to run 60 s (15 s when N=1) of
// steps. Every call is timed; the figure is the p99 of all of them, in ms
// (each kind's p50, p99 and max go to the log and the note). The goal: no
// failed call, every job ends 0, no step record lost or duplicated.
func readersTrial(t *testing.T, python string) trialResult {
	run := 15 * time.Second
	if os.Getenv("SCAV_BENCH_FAULTS") != "" {
		run = time.Minute
	}
	const readers, every = 8, 40
	total := int(run / (10 * time.Millisecond))
	// Room for every step record of the 4 jobs (48,000 at 60 s).
	d, c := faultDaemon(t, Config{StateDir: t.TempDir(), Retention: history.Retention{StepMaxBytes: 64 << 20, LogMaxBytes: 8 << 20, NodeMaxBytes: 1 << 20}})
	var js []api.Job
	var ids []string
	for range 4 {
		j := submitWorkers(t, c, python, t.TempDir(), total, every, false)
		js, ids = append(js, j), append(ids, j.ID)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	took := map[string][]time.Duration{}
	var errs []error
	stop := sync.OnceFunc(func() { cancel(); wg.Wait() })
	defer stop() // the readers end with the trial, even when it fails
	begin := time.Now()
	for k := range readers {
		rc, err := api.Dial(ctx, d.APISocket(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer rc.Close()
			mine := map[string][]time.Duration{}
			var failed []error
			for n := k; ctx.Err() == nil; n++ {
				read, id := apiReads[n%len(apiReads)], ids[(n/len(apiReads)+k)%len(ids)]
				callCtx, done := context.WithTimeout(ctx, time.Minute)
				start := time.Now()
				err := read.call(callCtx, rc, id)
				el := time.Since(start)
				done()
				if ctx.Err() != nil {
					break // the trial ended under the call
				}
				mine[read.name] = append(mine[read.name], el)
				if err != nil {
					failed = append(failed, fmt.Errorf("reader %d: %s %s: %w", k, read.name, id, err))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for name, ds := range mine {
				took[name] = append(took[name], ds...)
			}
			errs = append(errs, failed...)
		})
	}
	r := trialResult{ok: true}
	var jobErrs []error
	for i, j := range js {
		final := follow(t, c, j.ID, 10*run+3*time.Minute)
		var err error
		if js[i], err = c.Job(context.Background(), j.ID); err != nil {
			t.Fatal(err)
		}
		if final.ExitCode == nil || *final.ExitCode != 0 || js[i].State != api.StateSucceeded {
			r.ok = false
			jobErrs = append(jobErrs, fmt.Errorf("job %s %s: %s", j.ID, js[i].State, js[i].Message))
		}
	}
	ran := time.Since(begin)
	stop()
	errs = append(errs, jobErrs...)
	for _, j := range js {
		var one trialResult
		settle(t, c, j, total, &one)
		r.add(one)
	}
	var all []time.Duration
	var kinds []string
	for _, read := range apiReads {
		ds := took[read.name]
		all = append(all, ds...)
		kinds = append(kinds, fmt.Sprintf("%s %d calls p50 %s p99 %s max %s", read.name, len(ds), ms(percentile(ds, 0.5)), ms(percentile(ds, 0.99)), ms(percentile(ds, 1))))
	}
	r.figure = float64(percentile(all, 0.99)) / float64(time.Millisecond)
	r.ok = r.ok && len(errs) == 0
	r.note = fmt.Sprintf("%d calls in %s, %d errors; all p50 %s p99 %s max %s; %s", len(all), ran.Round(time.Second), len(errs),
		ms(percentile(all, 0.5)), ms(percentile(all, 0.99)), ms(percentile(all, 1)), strings.Join(kinds, "; "))
	t.Logf("API latency (ms) under 4 jobs, %d readers: %s", readers, r.note)
	for i, err := range errs {
		if i == 10 {
			t.Logf("... %d errors more", len(errs)-i)
			break
		}
		t.Logf("error: %v", err)
	}
	return r
}

// percentile is the q-quantile of ds (nearest rank; 1 is the largest), or 0.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[max(0, int(math.Ceil(q*float64(len(s))))-1)]
}

// ms prints d in milliseconds with one decimal.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}
