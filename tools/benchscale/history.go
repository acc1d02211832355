package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// The bench makes its histories fast: it writes job records and step
// records into a daemon's store as a daemon would have (the records a
// finished job leaves, the step messages a per-step writer's records
// become), instead of running the jobs.

// targetName is the name of the one job the name lookups look for.
const targetName = "bench-target"

// owner is the bench's user, as the daemon records a job's owner.
func owner() *api.Owner {
	o := &api.Owner{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid()), User: "root"}
	if u, err := user.Current(); err == nil {
		o.User = u.Username
	}
	return o
}

// finishedJob is the record of a finished job number i on node, created at
// created: one attempt of 2 workers that ran 100 steps.
func finishedJob(id, name, node string, created time.Time) api.Job {
	started, ended, code := created.Add(time.Second), created.Add(5*time.Minute), 0
	cfg := plugins.Config{Workers: 2, GlobalBatch: 64, LRScale: 1}
	return api.Job{
		ID: id, Name: name, Command: []string{"/usr/bin/python3", "train.py", "--epochs", "3"}, Dir: "/home/u/work", Config: cfg,
		Mode: plugins.ModeAuto, CheckpointDir: "/var/lib/scavenger/checkpoints/" + id, Grace: api.Duration(10 * time.Second),
		Owner: owner(), Node: node, Launcher: "local", State: api.StateSucceeded, Attempt: 1,
		Created: created, Started: &started, Ended: &ended, ExitCode: &code, MaxRestarts: 3,
		Attempts: []api.Attempt{{Attempt: 1, Config: cfg, Started: started, Ended: &ended, EndReason: "succeeded", FirstStep: 1, LastStep: 100}},
		Message:  "all workers exited 0", Optimize: api.Optimize{Policy: "fixed", Objective: "time"},
	}
}

// writeJobs writes n finished jobs' records into the job bucket, the
// oldest first, one of them (the middle one) named targetName.
func writeJobs(ctx context.Context, js jetstream.JetStream, node string, n int) error {
	kv, err := js.KeyValue(ctx, telemetry.JobBucket)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", telemetry.JobBucket, err)
	}
	t0 := time.Now().Add(-time.Duration(n) * time.Minute).UTC()
	for i := 0; i < n; i++ {
		name := "bench" + strconv.Itoa(i%50)
		if i == n/2 {
			name = targetName
		}
		id := fmt.Sprintf("%s-%06x", name, i)
		b, err := json.Marshal(finishedJob(id, name, node, t0.Add(time.Duration(i)*time.Minute)))
		if err != nil {
			return err
		}
		if _, err := kv.Put(ctx, id, b); err != nil {
			return fmt.Errorf("write job %s: %w", id, err)
		}
	}
	return nil
}

// stepRanks is the world of the bench's job with step records.
const stepRanks = 2

// writeSteps writes job id's record and n of its step records (n/stepRanks
// steps of stepRanks ranks, over two attempts), one record a message as a
// per-step writer's records are stored.
func writeSteps(ctx context.Context, js jetstream.JetStream, node, id string, n int) error {
	steps := int64(n / stepRanks)
	created := time.Now().Add(-time.Duration(steps) * 100 * time.Millisecond).UTC()
	j := finishedJob(id, "steps", node, created)
	half := steps / 2
	j.Attempts[0].LastStep, j.Attempt = half, 2
	moved := created.Add(time.Duration(half) * 100 * time.Millisecond)
	end := *j.Ended
	j.Attempts[0].Ended, j.Attempts[0].EndReason = &moved, "moved: requested"
	cfg2 := plugins.Config{Workers: stepRanks, GlobalBatch: 128, LRScale: 2}
	j.Attempts = append(j.Attempts, api.Attempt{Attempt: 2, Config: cfg2, Started: moved, Ended: &end, EndReason: "succeeded", FirstStep: half + 1, LastStep: steps})
	kv, err := js.KeyValue(ctx, telemetry.JobBucket)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", telemetry.JobBucket, err)
	}
	b, _ := json.Marshal(j)
	if _, err := kv.Put(ctx, id, b); err != nil {
		return fmt.Errorf("write job %s: %w", id, err)
	}
	subj := telemetry.StepSubject(id)
	t := float64(created.UnixNano()) / 1e9
	var pending []jetstream.PubAckFuture
	flush := func() error {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			return fmt.Errorf("publish step records of %s: no acknowledgement in a minute", id)
		}
		for _, p := range pending {
			select {
			case err := <-p.Err():
				return fmt.Errorf("publish step records of %s: %w", id, err)
			default:
			}
		}
		pending = pending[:0]
		return nil
	}
	for step := int64(1); step <= steps; step++ {
		attempt, batch, dt := 1, 64, 0.1
		if step > half {
			attempt, batch, dt = 2, 128, 0.12
		}
		t += dt
		for rank := 0; rank < stepRanks; rank++ {
			loss := 3 / (1 + float64(step)/1000)
			local, avg, compute, sync := 3.0+float64(step%7)/10, 2.0, dt*0.8, dt*0.2
			r := telemetry.StepRecord{V: 1, Job: id, Attempt: attempt, Rank: rank, World: stepRanks, Step: step, Time: t,
				Seconds: dt * (1 + float64(step%11)/100), Samples: batch / stepRanks, LocalBatch: batch / stepRanks, GlobalBatch: batch,
				ComputeSeconds: &compute, SyncSeconds: &sync, Loss: &loss, LocalSqr: &local, AvgSqr: &avg}
			b, _ := json.Marshal(r)
			f, err := js.PublishAsync(subj, append(b, '\n'))
			if err != nil {
				return fmt.Errorf("publish step records of %s: %w", id, err)
			}
			pending = append(pending, f)
			if len(pending) == 4096 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}
