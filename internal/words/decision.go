package words

import (
	"fmt"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
)

// Decision says a policy's decision in plain English, what it does and
// why, with its figures rounded: "trying 2 workers × batch 256 for ~20 s to
// measure it; expected to save ~40 s (a 92% chance it beats the current
// best)". It reads only the decision's structured fields (api.Decision:
// phase, configurations, predictions, the probe's value), never the
// policy's own Reason. showsCost says whether the job has a cost to show
// (api.Job.ShowsCost): without, no dollar figure appears, since the
// policy's costs are then at a placeholder price.
func Decision(d api.Decision, showsCost bool) string {
	var s string
	moving := !sameConfig(d.From, d.To)
	switch {
	case d.Phase == api.PhaseWarmup:
		s = "waiting for a steady estimate of the gradient noise before trying other configurations"
	case d.Phase == api.PhaseProbing && moving:
		s = "trying " + Config(d.To) + probeLength(d) + " to measure it" + probeGain(d.Probe, showsCost)
	case d.Phase == api.PhaseProbing:
		s = "measuring " + Config(d.To) + " a little longer" + probeLength(d)
	case moving:
		s = "moving to " + Config(d.To) + ": chosen by the policy"
		if d.PredictedS > 0 {
			s = "moving to " + Config(d.To) + ": predicted to " + finishText(d.PredictedS, d.PredictedUSD, showsCost)
		}
		if stay, ok := candidate(d, d.From); ok && d.PredictedS > 0 {
			s += ", against " + About(stay.TotalS) + " staying at " + Config(d.From)
		}
	default:
		s = "staying at " + Config(d.To) + ": " + stayReason(d, showsCost)
	}
	if d.Provisional {
		s += "; provisional, until the forecast of the gradient noise settles"
	}
	if d.ThroughputOnly {
		s += " (no gradient statistics: judged by throughput alone)"
	}
	return s
}

// Said is what decision d said in plain English: its recorded Words, or
// for a record from before they were kept, Decision now.
func Said(d api.Decision, showsCost bool) string {
	if d.Words != "" {
		return d.Words
	}
	return Decision(d, showsCost)
}

// probeLength is how long a probe measures: its time when its step time
// is predicted, else its steps.
func probeLength(d api.Decision) string {
	if d.Probe == nil || d.Probe.Steps <= 0 {
		return ""
	}
	if d.PredictedStepS > 0 {
		return " for " + About(d.Probe.Steps*d.PredictedStepS)
	}
	return " for " + Count(int64(d.Probe.Steps+0.5), "step")
}

// probeGain is what a valued probe is expected to gain, net of its cost,
// in seconds or (with a cost to show) dollars, and its chance; a probe of
// the model's design says that its model needs the point.
func probeGain(p *api.ProbeValue, showsCost bool) string {
	if p == nil {
		return ""
	}
	var s string
	net := p.Gain - p.Cost
	switch {
	case p.Gain <= 0:
	case net <= 0:
		s = "; it may gain as much as it costs"
	case p.GainUnit == "s":
		s = "; expected to save " + About(net)
	case p.GainUnit == "$" && showsCost:
		s = "; expected to save ~" + api.USDText(net)
	case p.GainUnit == "s·$":
		s = "; expected to improve the product of time and cost"
	default:
		s = "; expected to pay for itself"
	}
	if s != "" && p.Chance > 0 {
		s += fmt.Sprintf(" (a %.0f%% chance it beats the current best)", 100*p.Chance)
	}
	if p.Design {
		s += "; the model of its machine type needs this point"
	}
	return s
}

// finishText is a prediction of the time, and cost, to finish: "finish
// in ~3 min for ~$0.05".
func finishText(predictedS, predictedUSD float64, showsCost bool) string {
	s := "finish in " + About(predictedS)
	if showsCost && predictedUSD > 0 {
		s += " for ~" + api.USDText(predictedUSD)
	}
	return s
}

// stayReason says why a decision keeps the configuration: it is predicted
// the best, or the best other gains too little to pay for a relaunch, or
// the search is over.
func stayReason(d api.Decision, showsCost bool) string {
	best, ok := chosen(d)
	switch {
	case !ok && d.PredictedS > 0:
		return "predicted to " + finishText(d.PredictedS, d.PredictedUSD, showsCost)
	case !ok:
		return "the search is over"
	case sameCandidate(best, d.To):
		return "predicted the best (" + finishText(best.TotalS, best.TotalUSD, showsCost) + ")"
	}
	here, found := candidate(d, d.To)
	s := "the best other, " + Config(candidateConfig(best)) + ", is predicted to finish in " + About(best.TotalS)
	if found {
		s += " against " + About(here.TotalS) + " here"
	}
	return s + ": too little to pay for a relaunch"
}

// chosen is the candidate the decision chose, when it recorded them.
func chosen(d api.Decision) (api.CandidatePrediction, bool) {
	for _, c := range d.Candidates {
		if c.Chosen {
			return c, true
		}
	}
	return api.CandidatePrediction{}, false
}

// candidate is the decision's prediction for configuration cfg.
func candidate(d api.Decision, cfg plugins.Config) (api.CandidatePrediction, bool) {
	for _, c := range d.Candidates {
		if sameCandidate(c, cfg) {
			return c, true
		}
	}
	return api.CandidatePrediction{}, false
}

// sameCandidate reports whether c is configuration cfg (a configuration
// without a machine type is any type's: a job on one machine).
func sameCandidate(c api.CandidatePrediction, cfg plugins.Config) bool {
	return c.Workers == cfg.Workers && c.Batch == cfg.GlobalBatch && (cfg.MachineType == "" || c.Type == cfg.MachineType)
}

// sameConfig reports whether a and b are one configuration (what a move
// changes; the LR scale follows the batch).
func sameConfig(a, b plugins.Config) bool {
	return a.Workers == b.Workers && a.GlobalBatch == b.GlobalBatch && a.MachineType == b.MachineType && a.Market == b.Market
}

// candidateConfig is c as a configuration; a local job's candidates name
// the placeholder type "local", which says nothing.
func candidateConfig(c api.CandidatePrediction) plugins.Config {
	cfg := plugins.Config{Workers: c.Workers, GlobalBatch: c.Batch}
	if c.Type != "local" {
		cfg.MachineType = c.Type
	}
	return cfg
}
