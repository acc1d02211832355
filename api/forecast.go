package api

import (
	"math"
	"time"
)

// Left is what remains of a job, from its policy's forecast: the time and
// the money to finish, each with its 90 % interval. Past says that the job
// has run all the steps its forecast gave it and goes on: then only a lower
// bound is known (one step), and HiS and HiUSD are +Inf.
type Left struct {
	S, LoS, HiS       float64
	USD, LoUSD, HiUSD float64
	Past              bool
}

// Forecast is what is left of a job whose newest step is step and whose
// steps take stepS seconds now (0: unknown), at now, by the newest of
// decisions that predicted its finish; ok is false when none did.
//
// The steps the decision predicted to the finish count down with the steps
// the job makes, at the speed it runs now (else the predicted one): a job
// that runs slower than predicted has more time left, not less. The
// interval is the decision's, relative to its point. Before the job's
// steps are known (a decision without predicted steps) the time since the
// decision counts down instead.
func Forecast(decisions []Decision, step int64, stepS float64, now time.Time) (Left, bool) {
	for i := len(decisions) - 1; i >= 0; i-- {
		if d := decisions[i]; d.PredictedS > 0 {
			return d.left(step, stepS, now), true
		}
	}
	return Left{}, false
}

func (d Decision) left(step int64, stepS float64, now time.Time) Left {
	var l Left
	st := stepS
	if !(st > 0) {
		st = d.PredictedStepS
	}
	switch {
	case d.PredictedSteps > 0 && st > 0:
		steps := d.PredictedSteps - float64(max(step-d.Step, 0))
		if steps < 1 {
			return Left{S: st, LoS: st, HiS: math.Inf(1), USD: d.perS() * st, LoUSD: d.perS() * st, HiUSD: math.Inf(1), Past: true}
		}
		l.S = steps * st
	default:
		l.S = math.Max(d.PredictedS-now.Sub(d.Time).Seconds(), 0)
	}
	lo, hi := ratio(d.PredictedLoS, d.PredictedS), ratio(d.PredictedHiS, d.PredictedS)
	l.LoS, l.HiS = l.S*math.Min(lo, 1), l.S*math.Max(hi, 1)
	l.USD, l.LoUSD, l.HiUSD = l.S*d.perS(), l.LoS*d.perS(), l.HiS*d.perS()
	if d.PredictedUSDLo > 0 && d.PredictedUSD > 0 {
		l.LoUSD = l.USD * math.Min(d.PredictedUSDLo/d.PredictedUSD, 1)
		l.HiUSD = l.USD * math.Max(d.PredictedUSDHi/d.PredictedUSD, 1)
	}
	return l
}

// perS is the decision's predicted cost of a second.
func (d Decision) perS() float64 {
	if d.PredictedS <= 0 {
		return 0
	}
	return d.PredictedUSD / d.PredictedS
}

// ratio is a/b, 1 when either is unknown.
func ratio(a, b float64) float64 {
	if a > 0 && b > 0 {
		return a / b
	}
	return 1
}
