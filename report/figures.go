package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/optimizer/plot"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/stepstats"
)

// Figures is what the report's figures draw (plot.Panels lays them out):
// its heading, the attempts and how each ended, the step times measured
// and predicted per configuration, throughput, loss, noise scale, cost
// (with a price), the decisions' predicted times to finish against the
// times they took, and the candidates of the latest model-based decision.
func (r JobReport) Figures() plot.JobReport {
	f := plot.JobReport{Title: fmt.Sprintf("Job %s (%s)", r.Job, r.State), Subtitle: r.subtitle(), EndS: r.TotalS,
		NoPrice: !r.ShowsCost()}
	attempts := map[int]plot.Config{}
	for i, at := range r.Timeline {
		var next *Attempt
		if i+1 < len(r.Timeline) {
			next = &r.Timeline[i+1]
		}
		end := at.Started.Add(time.Duration(at.WallS * float64(time.Second)))
		c := plotConfig(at.Config)
		attempts[at.Attempt.Attempt] = c
		f.Attempts = append(f.Attempts, plot.Span{StartS: at.Started.Sub(r.start).Seconds(), EndS: end.Sub(r.start).Seconds(),
			Config: c, End: endKind(at, next)})
	}
	f.StepTimes = r.stepTimes()
	f.Throughput = segments(r.Throughput, attempts)
	f.Loss = points(r.Loss)
	f.Noise = points(r.Noise)
	if !f.NoPrice {
		f.Cost, f.PredictedCost = points(r.Cost), points(r.PredictedCost)
	}
	for _, d := range r.Finishes {
		f.Finishes = append(f.Finishes, plot.Finish{AtS: d.AtS, To: plot.Config{Type: d.Type, Workers: d.Workers, Batch: d.Batch},
			PredictedS: d.PredictedS, TookS: d.TookS})
	}
	for _, c := range r.Candidates {
		f.Candidates = append(f.Candidates, plot.Candidate{Config: plot.Config{Type: candidateType(c.Type), Workers: c.Workers, Batch: c.Batch},
			TimeS: c.TotalS, CostUSD: c.TotalUSD, Chosen: c.Chosen})
	}
	if len(r.Candidates) > 0 {
		f.ModelLabel = fmt.Sprintf("predicted by the model at step %d", r.CandidatesStep)
		f.CandidatesNote = fmt.Sprintf("decision at step %d, objective %s", r.CandidatesStep, orDash(r.Objective))
	}
	return f
}

// subtitle is the second line of the figure's heading: the policy, the
// attempts and relaunches, the time, and the cost as every view says it.
func (r JobReport) subtitle() string {
	var parts []string
	if r.Policy != "" {
		parts = append(parts, fmt.Sprintf("policy %s, objective %s", r.Policy, orDash(r.Objective)))
	}
	n := len(r.Timeline)
	at := fmt.Sprintf("%d attempt(s)", n)
	if n > 1 {
		at += fmt.Sprintf(", %d relaunch(es) taking %.1f s", n-1, r.RelaunchS)
	}
	parts = append(parts, at)
	total := time.Duration(r.TotalS * float64(time.Second)).Round(100 * time.Millisecond).String()
	return strings.Join(append(parts, total, r.CostText()), "; ")
}

// endKind is how attempt at ended, for the timeline's marks: from its end
// reason, and for a move from the phase of the decision that started the
// next attempt (next; nil for the last).
func endKind(at Attempt, next *Attempt) plot.EndKind {
	why := at.EndReason
	switch {
	case strings.HasPrefix(why, "moved:"):
		switch {
		case strings.Contains(why, "pre-empted"):
			return plot.EndPreempt
		case next != nil && next.StartedBy == string(policy.PhaseProbing):
			return plot.EndProbe
		}
		return plot.EndMove
	case strings.HasPrefix(why, "failed"), strings.HasPrefix(why, "lost"):
		return plot.EndFailure
	case strings.HasPrefix(why, "stopped"):
		return plot.EndStop
	case why == "succeeded" || why == "finished":
		return plot.EndFinish
	}
	return plot.EndNone
}

// stepTimes are the step times of the configurations of the timeline, in
// order of first appearance: the median of its attempts' measured ones,
// what was predicted when it was last chosen (not a prediction made later)
// and what the latest model predicts.
func (r JobReport) stepTimes() []plot.StepTime {
	var order []plot.Config
	measured := map[plot.Config][]float64{}
	st := map[plot.Config]*plot.StepTime{}
	for _, at := range r.Timeline {
		c := plotConfig(at.Config)
		if st[c] == nil {
			order = append(order, c)
			st[c] = &plot.StepTime{Config: c}
		}
		if at.MeasuredStepS > 0 {
			measured[c] = append(measured[c], at.MeasuredStepS)
		}
		if at.PredictedStepS > 0 && !at.PredictedLater {
			st[c].ChosenS = at.PredictedStepS
		}
		if at.ModelStepS > 0 {
			st[c].ModelS = at.ModelStepS
		}
	}
	out := make([]plot.StepTime, len(order))
	for i, c := range order {
		out[i] = *st[c]
		out[i].MeasuredS = stepstats.Median(measured[c])
	}
	return out
}

// segments splits a series by attempt, each part with its attempt's
// configuration (points of an attempt not in attempts are left out).
func segments(ps []stepstats.Point, attempts map[int]plot.Config) []plot.Segment {
	var out []plot.Segment
	for i, p := range ps {
		c, ok := attempts[p.Attempt]
		if !ok {
			continue
		}
		if i == 0 || p.Attempt != ps[i-1].Attempt || len(out) == 0 {
			out = append(out, plot.Segment{Config: c})
		}
		out[len(out)-1].Points = append(out[len(out)-1].Points, plot.XY{X: p.T, Y: p.V})
	}
	return out
}

// plotConfig is cfg as the figures draw it (one colour per configuration).
func plotConfig(cfg plugins.Config) plot.Config {
	return plot.Config{Type: cfg.MachineType, Workers: cfg.Workers, Batch: cfg.GlobalBatch}
}

// candidateType is a candidate's machine type as its configuration names
// it: a job on the machines it was given has none, though its candidates
// name the placeholder "local".
func candidateType(t string) string {
	if t == "local" {
		return ""
	}
	return t
}

// points is a series as the figures take it.
func points(ps []stepstats.Point) []plot.XY {
	out := make([]plot.XY, 0, len(ps))
	for _, p := range ps {
		out = append(out, plot.XY{X: p.T, Y: p.V})
	}
	return out
}
