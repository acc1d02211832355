package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// history is the benchmark's job: its record and its step records, written
// into scavd's store as its ingest and job registry would write them.
type history struct {
	job     api.Job
	recs    []telemetry.StepRecord
	records int
	steps   int64
	// next is the next step the live records take.
	next int64
}

// The attempts' configurations and step times.
var attempts = []struct {
	cfg   plugins.Config
	stepS float64
}{
	{plugins.Config{Workers: 1, GlobalBatch: 32}, 0.05},
	{plugins.Config{Workers: 2, GlobalBatch: 64}, 0.04},
	{plugins.Config{Workers: 2, GlobalBatch: 256}, 0.09},
	{plugins.Config{Workers: 2, GlobalBatch: 128}, 0.06},
}

// newHistory is a running job of n step records (every rank's) over the
// four attempts, a quarter each, that ended at now, with 3 s relaunches;
// three decisions moved it, each with its predictions and candidates.
func newHistory(n int, me *user.User, now time.Time) *history {
	uid, _ := strconv.ParseUint(me.Uid, 10, 32)
	gid, _ := strconv.ParseUint(me.Gid, 10, 32)
	h := &history{records: n}
	var total float64
	for _, a := range attempts {
		total += float64(n/4/a.cfg.Workers)*a.stepS + 3
	}
	start := now.Add(-time.Duration(total * float64(time.Second)))
	t := float64(start.UnixNano()) / 1e9
	j := api.Job{ID: "bench-dash-0a0b0c", Name: "bench-dash", Command: []string{"python", "train.py"}, Dir: "/tmp", Node: "bench",
		Launcher: "local", State: api.StateRunning, Created: start, Started: &start, Config: attempts[3].cfg, Phase: api.PhaseOptimised,
		Owner:    &api.Owner{UID: uint32(uid), GID: uint32(gid), User: me.Username},
		Optimize: api.Optimize{Policy: "scavenger", Objective: "time", MinWorkers: 1, MaxWorkers: 2, MinBatch: 32, MaxBatch: 256, PriceUSDPerHour: 2.5}}
	for i, a := range attempts {
		began := time.Unix(0, int64(t*1e9))
		at := api.Attempt{Attempt: i + 1, Config: a.cfg, Started: began, FirstStep: h.steps + 1, Handle: "bench"}
		if i > 0 {
			d := decision(h.steps, began.Add(-3*time.Second), attempts[i-1].cfg, a.cfg, a.stepS, i == 3)
			j.Decisions = append(j.Decisions, d)
		}
		for s := 0; s < n/4/a.cfg.Workers; s++ {
			t += a.stepS
			h.steps++
			for rank := 0; rank < a.cfg.Workers; rank++ {
				h.recs = append(h.recs, record(j.ID, i+1, rank, a.cfg, h.steps, t, a.stepS))
			}
		}
		at.LastStep = h.steps
		if i < 3 {
			end := time.Unix(0, int64(t*1e9))
			at.Ended = &end
			at.Move = &api.MoveTiming{Checkpoint: 0.8, Exit: 0.2, Start: 0.1, FirstStep: 1.9}
			t += 3
		}
		j.Attempts = append(j.Attempts, at)
	}
	for i, d := range j.Decisions {
		j.Attempts[i].EndReason = "moved: " + d.Reason
	}
	j.Attempt = 4
	h.job, h.next = j, h.steps+1
	return h
}

// decision is the policy's move from one configuration to the next at step.
func decision(step int64, t time.Time, from, to plugins.Config, stepS float64, model bool) api.Decision {
	d := api.Decision{Time: t, Step: step, From: from, To: to, Phase: api.PhaseProbing, Reason: "scavenger search: probe " + configName(to)}
	if !model {
		return d
	}
	d.Phase, d.Reason = api.PhaseOptimised, "least time: "+configName(to)
	d.PredictedStepS, d.PredictedS, d.PredictedUSD = stepS*1.05, 600, 600.0/3600*2.5
	for _, k := range []int{1, 2} {
		for _, b := range []int{32, 64, 128, 256} {
			s := 0.02*float64(b/k)/32 + 0.02*float64(k-1) + 0.01
			total := 200 * s * 256 / float64(b) * 10
			d.Candidates = append(d.Candidates, api.CandidatePrediction{Type: "local", Workers: k, Batch: b, StepS: s,
				TotalS: total, TotalUSD: total / 3600 * 2.5, Chosen: k == to.Workers && b == to.GlobalBatch})
		}
	}
	return d
}

func configName(c plugins.Config) string { return fmt.Sprintf("local:%d:%d", c.Workers, c.GlobalBatch) }

// record is one rank's record of a step.
func record(job string, attempt, rank int, cfg plugins.Config, step int64, t, dt float64) telemetry.StepRecord {
	loss := 2.3*math.Exp(-float64(step)/4000) + 0.05*math.Sin(float64(step))
	local, avg := 3+math.Sin(float64(step)/7), 2+0.5*math.Cos(float64(step)/11)
	return telemetry.StepRecord{V: telemetry.SchemaVersion, Job: job, Attempt: attempt, Rank: rank, World: cfg.Workers, Step: step, Time: t,
		Seconds: dt, Samples: cfg.LocalBatch(), LocalBatch: cfg.LocalBatch(), GlobalBatch: cfg.GlobalBatch, Loss: &loss,
		LocalSqr: &local, AvgSqr: &avg}
}

// write puts the job's record in the job bucket and its step records in
// the step stream, ten to a message as the ingest batches them.
func (h *history) write(ctx context.Context, js jetstream.JetStream) error {
	kv, err := js.KeyValue(ctx, telemetry.JobBucket)
	if err != nil {
		return fmt.Errorf("job bucket: %w", err)
	}
	b, _ := json.Marshal(h.job)
	if _, err := kv.Put(ctx, h.job.ID, b); err != nil {
		return fmt.Errorf("put the job: %w", err)
	}
	for i := 0; i < len(h.recs); i += 10 {
		if err := publish(ctx, js, h.recs[i:min(i+10, len(h.recs))]); err != nil {
			return err
		}
	}
	for i := 0; i < 200; i++ {
		l, _ := json.Marshal(telemetry.LogLine{Attempt: 4, Stream: "stdout", Line: fmt.Sprintf("epoch %d: loss %.4f", i, 1/float64(i+1)), Time: time.Now(), N: int64(i + 1)})
		if _, err := js.Publish(ctx, telemetry.LogSubject(h.job.ID), l); err != nil {
			return fmt.Errorf("publish output: %w", err)
		}
	}
	return nil
}

// publish sends records as one message of the step stream.
func publish(ctx context.Context, js jetstream.JetStream, recs []telemetry.StepRecord) error {
	var lines []string
	for _, r := range recs {
		b, _ := json.Marshal(r)
		lines = append(lines, string(b))
	}
	if _, err := js.Publish(ctx, telemetry.StepSubject(recs[0].Job), []byte(strings.Join(lines, "\n"))); err != nil {
		return fmt.Errorf("publish steps: %w", err)
	}
	return nil
}

// sent is a live step's publication time, in Unix ms.
type sent struct {
	step int64
	at   float64
}

// publishLive publishes the next steps of the last attempt, 10 a second,
// for d, and returns when each went out.
func (h *history) publishLive(ctx context.Context, js jetstream.JetStream, d time.Duration) ([]sent, error) {
	a := attempts[3]
	var out []sent
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		now := time.Now()
		var recs []telemetry.StepRecord
		for rank := 0; rank < a.cfg.Workers; rank++ {
			recs = append(recs, record(h.job.ID, 4, rank, a.cfg, h.next, float64(now.UnixNano())/1e9, 0.1))
		}
		if err := publish(ctx, js, recs); err != nil {
			return nil, err
		}
		out = append(out, sent{step: h.next, at: float64(now.UnixNano()) / 1e6})
		h.next++
	}
	return out, nil
}
