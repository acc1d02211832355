package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// event publishes a lifecycle event of the job's attempt.
func (r *runner) event(kind telemetry.EventKind, attempt int, msg string) {
	r.publish(telemetry.Event{Kind: kind, Job: r.rec.job.ID, Attempt: attempt, Message: msg})
}

// decided publishes a decision of the job's policy, in plain English
// (api.Decision.Words), with its predicted cost only when the job has a
// cost to show (api.Job.CostAt).
func (r *runner) decided(attempt int, d api.Decision) {
	e := telemetry.Event{Kind: telemetry.EventDecided, Job: r.rec.job.ID, Attempt: attempt, Message: d.Words,
		Phase: string(d.Phase), PredictedS: d.PredictedS}
	if r.rec.job.ShowsCost() {
		e.PredictedUSD = d.PredictedUSD
	}
	r.publish(e)
}

func (r *runner) publish(e telemetry.Event) {
	e.Time = time.Now().UTC()
	b, _ := json.Marshal(e)
	if err := r.g.o.NC.Publish(telemetry.EventSubject(e.Job), b); err != nil {
		r.log.Warn("publish event", zap.String("kind", string(e.Kind)), zap.Error(err))
	}
}

// publishStored publishes e into the output stream and waits for the
// stream to store it; its message id makes a second try after a lost
// acknowledgement a duplicate the stream drops.
func (r *runner) publishStored(ctx context.Context, e telemetry.Event) error {
	b, _ := json.Marshal(e)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveTimeout)
	defer cancel()
	id := fmt.Sprintf("%s-%s-%d", e.Job, e.Kind, e.Attempt)
	if _, err := r.g.js.Publish(ctx, telemetry.EventSubject(e.Job), b, jetstream.WithMsgID(id)); err != nil {
		return fmt.Errorf("publish %s event of %s: %w", e.Kind, e.Job, err)
	}
	return nil
}

// publishStep publishes a step record the daemon made itself.
func (r *runner) publishStep(rec telemetry.StepRecord) error {
	b, _ := json.Marshal(rec)
	return r.g.o.NC.Publish(telemetry.StepSubject(rec.Job), append(b, '\n'))
}

// output publishes each worker line of attempt, as the job's output cap
// lets it (outputcap.go), and lets steps read the job's progress off it.
func (r *runner) output(attempt int, steps *outputSteps) plugins.OutputFunc {
	job := r.rec.job.ID
	return func(rank int, stream plugins.Stream, line string) {
		r.out.take(telemetry.LogLine{Attempt: attempt, Rank: rank, Stream: string(stream), Line: line, Time: time.Now().UTC()})
		steps.line(job, &r.prog, rank, stream, line, r.log)
	}
}

// publishLine publishes one output line on subject.
func (r *runner) publishLine(subject string, l telemetry.LogLine) {
	b, _ := json.Marshal(l)
	if err := r.g.o.NC.Publish(subject, b); err != nil {
		r.log.Debug("publish output", zap.Error(err))
	}
}
