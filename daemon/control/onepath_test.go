package control

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/optimizer/price"
	"github.com/scavenger-ml/scavenger/optimizer/sim"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// oneNode is a synthetic application on one machine type "local" (two GPUs
// a node) whose candidates are exactly those a live job on one node with
// --workers 1:2 --batch-size 32:256 searches: step time 10 ms plus 1 ms a
// sample of the local batch (5 ms more sync with two workers), and a noise
// scale that grows as the job goes.
func oneNode() fstest.MapFS {
	var pl strings.Builder
	pl.WriteString("placement,local_bsz,step_time,sync_time\n")
	for _, k := range []int{1, 2} {
		for l := 16; l <= 256; l *= 2 {
			sync := 0.0
			if k == 2 {
				sync = 0.005
			}
			fmt.Fprintf(&pl, "%d,%d,%g,%g\n", k, l, 0.01+0.001*float64(l)+sync, sync)
		}
	}
	fs := fstest.MapFS{"one/placements-local.csv": {Data: []byte(pl.String())}}
	for b := 32; b <= 256; b *= 2 {
		var v strings.Builder
		v.WriteString("progress,iteration,metric,grad_sqr,grad_var\n")
		for p := 500; p <= 3000; p += 500 {
			fmt.Fprintf(&v, "%d,%g,0.5,%g,1\n", p, float64(p)*32/float64(b)*(1+float64(b)/512), 1/(1+float64(p)/500))
		}
		fs[fmt.Sprintf("one/validation-%d.csv", b)] = &fstest.MapFile{Data: []byte(v.String())}
	}
	return fs
}

// replayJob is the Job a controller follows while a recorded sequence of
// step records is replayed into it: Current gives, record by record, the
// attempt and configuration the record came from (the controller asks once
// per record, in order).
type replayJob struct {
	mu  sync.Mutex
	cur []plugins.Config
	att []int
}

func (j *replayJob) push(attempt int, cfg plugins.Config) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.att, j.cur = append(j.att, attempt), append(j.cur, cfg)
}

func (j *replayJob) Current() (int, plugins.Config) {
	j.mu.Lock()
	defer j.mu.Unlock()
	a, c := j.att[0], j.cur[0]
	j.att, j.cur = j.att[1:], j.cur[1:]
	return a, c
}
func (*replayJob) LastStep() int64  { return 0 }
func (*replayJob) SetNoise(float64) {}

// TestOneDecisionPath: the step records a simulated job emitted, one per
// step as a live worker sends them, replayed into the live controller give
// the same decisions as the simulator took on them — the same observer and
// policy (optimizer/observe) decide in both.
func TestOneDecisionPath(t *testing.T) {
	for _, pol := range []string{"scavenger", "adaptive"} {
		t.Run(pol, func(t *testing.T) {
			type tapped struct {
				rec telemetry.StepRecord
				d   *policy.Decision
			}
			var recs []tapped
			cat := &price.Catalog{Types: []price.MachineType{{Name: "local", GPUs: 2, OnDemand: &price.Price{USDPerHour: 1}}}}
			rep, err := sim.Run(context.Background(), sim.Options{FS: oneNode(), App: "one", Types: []string{"local"}, Catalog: cat,
				Objective: objective.Objective{Kind: objective.Time}, Policy: pol, RelaunchPenalty: 3 * time.Second,
				ReportSteps: 10, Stepwise: true, Tap: func(r telemetry.StepRecord, d *policy.Decision) { recs = append(recs, tapped{r, d}) }})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Relaunches == 0 {
				t.Fatalf("the simulated job never moved: nothing to compare (%s)", rep.Reason)
			}

			j := api.Job{ID: "one", Config: plugins.Config{Workers: 1, GlobalBatch: 32, LRScale: 1},
				Optimize: api.Optimize{Policy: pol, Objective: "time", MinWorkers: 1, MaxWorkers: 2, MinBatch: 32, MaxBatch: 256, TargetSamples: 3000 * 32}}
			job := &replayJob{}
			verdicts := make(chan Verdict)
			c, err := New(j, nil, job, verdicts, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			go func() { defer close(done); c.Run(ctx) }()
			var mu sync.Mutex
			var got []api.Decision
			collected := make(chan struct{})
			go func() {
				defer close(collected)
				for {
					select {
					case v := <-verdicts:
						mu.Lock()
						got = append(got, v.Decision)
						mu.Unlock()
						v.Reply <- nil
					case <-done:
						return
					}
				}
			}()

			// What the controller must hand on: every decision that
			// changes its verdict (Run's rule), in the record's form.
			var want []api.Decision
			var last api.Decision
			for _, r := range recs {
				cfg := plugins.Config{Workers: r.rec.World, GlobalBatch: r.rec.GlobalBatch, LRScale: 1}
				job.push(r.rec.Attempt, cfg)
				c.queued.Add(1) // as Steps counts it, but never dropped: the replay must be whole
				c.recs <- []telemetry.StepRecord{r.rec}
				if r.d == nil {
					continue
				}
				dec := decision(cfg, r.rec.Step, time.Time{}, *r.d)
				if dec.To == last.To && dec.Phase == last.Phase && dec.To == cfg {
					continue
				}
				last = dec
				want = append(want, dec)
			}
			count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
			for deadline := time.Now().Add(10 * time.Second); (len(c.recs) > 0 || count() < len(want)) && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			cancel()
			<-done
			<-collected
			if len(got) != len(want) {
				t.Fatalf("the controller handed on %d decisions, the simulator took %d", len(got), len(want))
			}
			for i := range want {
				g, w := got[i], want[i]
				if g.To != w.To || g.Phase != w.Phase || g.Reason != w.Reason || g.Step != w.Step || g.PredictedS != w.PredictedS {
					t.Errorf("decision %d: controller %+v\nsimulator %+v", i, g, w)
				}
			}
			t.Logf("%d records, %d decisions handed on, %d relaunches: identical", len(recs), len(got), rep.Relaunches)
		})
	}
}
