package stepstats

import "github.com/scavenger-ml/scavenger/telemetry"

// RateSteps is the number of recent steps a Rate is taken over.
const RateSteps = 20

// Rate is a job's samples per second over its last RateSteps steps, from
// rank 0's step records (each step's global batch; every rank reports the
// same step). The zero value has seen no step.
type Rate struct {
	window []ratePoint
}

// ratePoint is one step of the window: when it ended and its samples.
type ratePoint struct {
	t       float64
	samples int
}

// Add takes step record r; records of other ranks than 0 are ignored. A
// step without a global batch counts its worker's samples times the world.
func (w *Rate) Add(r telemetry.StepRecord) {
	if r.Rank != 0 {
		return
	}
	w.window = append(w.window, ratePoint{r.Time, stepSamples(r)})
	if len(w.window) > RateSteps {
		w.window = w.window[1:]
	}
}

// PerSecond is the samples per second between the first and the last step
// of the window (0 before two steps).
func (w *Rate) PerSecond() float64 {
	if len(w.window) < 2 {
		return 0
	}
	n := 0
	for _, p := range w.window[1:] {
		n += p.samples
	}
	if dt := w.window[len(w.window)-1].t - w.window[0].t; dt > 0 {
		return float64(n) / dt
	}
	return 0
}

// Reset forgets the steps seen (a relaunch: the new configuration's speed
// is not the last one's).
func (w *Rate) Reset() { w.window = nil }
