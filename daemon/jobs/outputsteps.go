package jobs

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
	textprogress "github.com/scavenger-ml/scavenger/telemetry/progress"
)

// maxStepsPerLine caps the step records one progress line may stand for (a
// bar that jumps ahead after a burst of buffered output); minStepSeconds is
// the shortest step a line may show: a jump whose steps would each take
// less ("step 300000000" a millisecond after "step 3") is no run of steps
// but a number that grew, and stands for one record, with no step time.
const (
	maxStepsPerLine = 1000
	minStepSeconds  = 1e-6
)

// outputSteps turns the progress an uninstrumented job prints (tqdm bars,
// "step N" lines, or the user's --step-regex) into step records, so that
// jobs without the python client can be measured and moved too. It reads one
// stream only: the first (rank, stream) that shows progress. It stands down
// as soon as the job's workers report steps themselves.
type outputSteps struct {
	mu      sync.Mutex
	base    *textprogress.Parser
	parsers map[[2]any]*textprogress.Parser
	source  *[2]any
	attempt int
	start   int64 // the attempt's start step
	cfg     plugins.Config
	publish func(telemetry.StepRecord) error
}

// newOutputSteps builds the reader from the job's --step-regex ("" for the built-ins).
func newOutputSteps(stepRegex string, publish func(telemetry.StepRecord) error) (*outputSteps, error) {
	p, err := textprogress.New(stepRegex)
	if err != nil {
		return nil, err
	}
	return &outputSteps{base: p, parsers: map[[2]any]*textprogress.Parser{}, publish: publish}, nil
}

// attemptStarted forgets the streams of the attempt before.
func (o *outputSteps) attemptStarted(attempt int, cfg plugins.Config, startStep int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.attempt, o.cfg, o.source, o.start = attempt, cfg, nil, startStep
	o.parsers = map[[2]any]*textprogress.Parser{}
}

// line reads one output line of rank's stream of job, whose steps prog follows.
func (o *outputSteps) line(job string, prog *progress, rank int, stream plugins.Stream, text string, log *zap.Logger) {
	if prog.now().Stepped {
		return // the workers report steps themselves: no need to read the output
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	key := [2]any{rank, stream}
	if o.source != nil && *o.source != key {
		return
	}
	p := o.parsers[key]
	if p == nil {
		p = o.base.Fresh(o.start)
		o.parsers[key] = p
	}
	st, ok := p.Parse(text, time.Now())
	if !ok || st.Delta <= 0 {
		return
	}
	if o.source == nil {
		o.source = &key
	}
	n, per := min(st.Delta, maxStepsPerLine), st.StepSeconds()
	if per > 0 && per < minStepSeconds {
		log.Debug("a progress line jumps faster than steps run: one record for it", zap.String("job", job),
			zap.Int64("steps", st.Delta), zap.Float64("seconds", st.Elapsed))
		n, per = 1, 0
	}
	first := prog.claimSteps(n)
	if first == 0 {
		return // the workers report steps themselves
	}
	for i := int64(0); i < n; i++ {
		t := st.Time.Add(-time.Duration(float64(n-1-i) * per * float64(time.Second)))
		rec := telemetry.StepRecord{
			V: telemetry.SchemaVersion, Job: job, Attempt: o.attempt, Rank: 0, World: o.cfg.Workers,
			Step: first + i, Time: float64(t.UnixNano()) / 1e9, Seconds: per,
			Samples: o.cfg.LocalBatch(), LocalBatch: o.cfg.LocalBatch(), GlobalBatch: o.cfg.GlobalBatch,
			From: telemetry.FromOutput, Total: st.Total,
		}
		if i == n-1 {
			rec.Loss = st.Loss
		}
		if err := o.publish(rec); err != nil {
			log.Debug("publish output step", zap.Error(err))
			return
		}
	}
}
