package plot

import (
	"fmt"

	"gonum.org/v1/plot"

	"github.com/scavenger-ml/scavenger/internal/words"
)

// JobReport is what the figures of `scavctl report` draw, as plain values:
// the caller (package report) fills it from a job's record and step
// history. Times are seconds since the job started.
type JobReport struct {
	// Title names the job; Subtitle says the rest of what the figure's
	// heading says (its state, policy, objective, the price assumed or that
	// none was set, the totals).
	Title, Subtitle string
	// EndS is the job's length: every time axis runs from 0 to it (0: as
	// far as the data goes).
	EndS float64
	// Attempts is the timeline of configurations, one span per launch.
	Attempts []Span
	// StepTimes compares, per configuration, the measured step time with
	// the predicted ones; ModelLabel names the model of StepTime.ModelS
	// ("latest model (step 207)").
	StepTimes  []StepTime
	ModelLabel string
	// Throughput is the samples per second over time, one segment per
	// attempt; Loss rank 0's training loss over time.
	Throughput []Segment
	Loss       []XY
	// Noise is the gradient noise scale (samples) over time.
	Noise []XY
	// Cost is the cumulative cost ($) over time; PredictedCost the cost at
	// the finish that each decision predicted (spent so far plus the
	// prediction), at the time of the decision. Both are empty when no price
	// was set (NoPrice): then the candidates' costs mean nothing either.
	Cost          []XY
	PredictedCost []XY
	NoPrice       bool
	// Finishes are the decisions' predicted times to finish, with the time
	// it took.
	Finishes []Finish
	// Candidates are the predictions of one decision (time and cost to
	// finish) that the front is drawn from; CandidatesNote says which one.
	Candidates     []Candidate
	CandidatesNote string
}

// XY is one point of a series.
type XY struct{ X, Y float64 }

// Config is a configuration: every figure draws one in the same colour.
type Config struct {
	// Type is the machine type, when the job has one (a cloud job's); ""
	// for a job on the machines it was given.
	Type    string
	Workers int
	Batch   int
}

// Label names the configuration in the one notation (internal/words):
// "2x64", "loc.half 2x64".
func (c Config) Label() string { return words.Notation(c.Type, c.Workers, c.Batch) }

// EndKind says how an attempt ended; the timeline marks each with its own
// glyph.
type EndKind string

// How attempts end.
const (
	// EndNone: it still runs, or nothing says.
	EndNone EndKind = ""
	// EndProbe: the policy moved on to probe another configuration.
	EndProbe EndKind = "probe"
	// EndMove: the policy (or a person) moved the job to another configuration.
	EndMove EndKind = "move"
	// EndPreempt: the scheduler pre-empted it and the job was relaunched.
	EndPreempt EndKind = "pre-emption"
	// EndFailure: it failed or was lost.
	EndFailure EndKind = "failure"
	// EndStop: it was stopped on request.
	EndStop EndKind = "stop"
	// EndFinish: the job finished.
	EndFinish EndKind = "finished"
)

// endKinds are the kinds the timeline marks, in the order of its legend.
var endKinds = []EndKind{EndProbe, EndMove, EndPreempt, EndFailure, EndStop, EndFinish}

// Span is one attempt: when it ran, in which configuration, and how it ended.
type Span struct {
	StartS, EndS float64
	Config
	End EndKind
}

// StepTime is the measured step time of one configuration and what was
// predicted for it when it was chosen and by the latest model (0: not known).
type StepTime struct {
	Config
	MeasuredS float64
	ChosenS   float64
	ModelS    float64
}

// Segment is one attempt's part of a series over time.
type Segment struct {
	Config
	Points []XY
}

// Finish is one decision's predicted time to finish against the time it
// took (TookS 0: not known, the job has not finished).
type Finish struct {
	// AtS is the time of the decision; To the configuration it chose.
	AtS        float64
	To         Config
	PredictedS float64
	TookS      float64
}

// Candidate is one configuration's predicted time and cost to finish.
type Candidate struct {
	Config
	TimeS   float64
	CostUSD float64
	Chosen  bool
}

// Panel is one figure of a report.
type Panel struct {
	// Name is a short file-name-safe name ("timeline", "pareto", ...).
	Name string
	Plot *plot.Plot
}

// panelMaker draws one panel when the report has data for it.
type panelMaker struct {
	name string
	has  func(JobReport) bool
	draw func(JobReport, colours) (*plot.Plot, error)
}

// panelMakers are the report's panels, in the order of the figure.
var panelMakers = []panelMaker{
	{"timeline", func(r JobReport) bool { return len(r.Attempts) > 0 }, timelinePlot},
	{"steptime", hasStepTimes, stepTimePlot},
	{"throughput", hasThroughput, throughputPlot},
	{"loss", func(r JobReport) bool { return len(r.Loss) > 0 }, lossPlot},
	{"noise", func(r JobReport) bool { return anyPositive(r.Noise) }, noisePlot},
	{"cost", func(r JobReport) bool { return len(r.Cost) > 0 && !r.NoPrice }, costPlot},
	{"finish", func(r JobReport) bool { return len(r.Finishes) > 0 }, finishPlot},
	{"pareto", func(r JobReport) bool { return len(r.Candidates) > 0 }, paretoPlot},
}

// PanelNames are the names of the panels r has data for, in the figure's
// order: timeline, steptime, throughput, loss, noise, cost (with a price),
// finish, pareto.
func PanelNames(r JobReport) []string {
	var out []string
	for _, m := range panelMakers {
		if m.has(r) {
			out = append(out, m.name)
		}
	}
	return out
}

// Panels draws every figure r has data for (PanelNames), each with its
// legend; a configuration has the same colour in all of them.
func Panels(r JobReport) ([]Panel, error) {
	cs := colourConfigs(r)
	var out []Panel
	for _, m := range panelMakers {
		if !m.has(r) {
			continue
		}
		p, err := m.draw(r, cs)
		if err != nil {
			return nil, fmt.Errorf("draw %s of %s: %w", m.name, r.Title, err)
		}
		out = append(out, Panel{Name: m.name, Plot: p})
	}
	return out, nil
}

func hasStepTimes(r JobReport) bool {
	for _, s := range r.StepTimes {
		if s.MeasuredS > 0 || s.ChosenS > 0 || s.ModelS > 0 {
			return true
		}
	}
	return false
}

func hasThroughput(r JobReport) bool {
	for _, s := range r.Throughput {
		if anyPositive(s.Points) {
			return true
		}
	}
	return false
}

// anyPositive reports whether a point of v has Y > 0 (can go on a log scale).
func anyPositive(v []XY) bool {
	for _, p := range v {
		if p.Y > 0 {
			return true
		}
	}
	return false
}
