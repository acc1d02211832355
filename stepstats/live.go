package stepstats

import (
	"encoding/json"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// Live is what `scavctl top` shows of a running job, from rank 0's step
// records as they come: the newest step, the samples per second and the
// median step time over the last RateSteps steps of the current attempt,
// and the noise scale along the job (Noise). Records of steps it has seen
// already are ignored, so that it can take a replayed history and the live
// records in any overlap. The zero value has no base batch (no noise
// scale); its fields are its JSON form.
type Live struct {
	Step    int64 `json:"step"`
	Attempt int   `json:"attempt"`
	Rate    Rate  `json:"rate"`
	// Dts are the step times of the rate's steps.
	Dts   []float64 `json:"dts,omitempty"`
	Noise Noise     `json:"noise"`
}

// NewLive is a Live whose noise scale is taken against base batch m0.
func NewLive(m0 float64) Live { return Live{Noise: Noise{M0: m0}} }

// Add takes one step record; records of ranks other than 0, and those of
// steps already seen, are ignored.
func (l *Live) Add(r telemetry.StepRecord) {
	if r.Rank != 0 || !r.IsStep() || r.Step <= l.Step {
		return
	}
	if r.Attempt != l.Attempt {
		// A new configuration: its speed is not the last one's.
		l.Attempt, l.Dts = r.Attempt, nil
		l.Rate.Reset()
	}
	l.Step = r.Step
	l.Rate.Add(r)
	if r.Seconds > 0 {
		l.Dts = append(l.Dts, r.Seconds)
		if len(l.Dts) > RateSteps {
			l.Dts = l.Dts[1:]
		}
	}
	l.Noise.Add(r)
}

// StepS is the median step time over the last steps (0: none yet).
func (l *Live) StepS() float64 { return Median(l.Dts) }

// NoiseScale is the gradient noise scale once the estimate averages enough
// samples (0 before: Noise.Scale).
func (l *Live) NoiseScale() float64 {
	v, _ := l.Noise.Scale()
	return v
}

// MarshalJSON writes the rate's window as [[t, samples], ...].
func (w Rate) MarshalJSON() ([]byte, error) {
	out := make([][2]float64, len(w.window))
	for i, p := range w.window {
		out[i] = [2]float64{p.t, float64(p.samples)}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (w *Rate) UnmarshalJSON(b []byte) error {
	var in [][2]float64
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	w.window = make([]ratePoint, len(in))
	for i, p := range in {
		w.window[i] = ratePoint{t: p[0], samples: int(p[1])}
	}
	return nil
}

// noiseJSON is Noise's JSON form.
type noiseJSON struct {
	M0  float64       `json:"m0"`
	Est gns.Estimator `json:"est"`
}

// MarshalJSON writes the base batch and the estimator's state.
func (n Noise) MarshalJSON() ([]byte, error) { return json.Marshal(noiseJSON{n.M0, n.est}) }

// UnmarshalJSON reads what MarshalJSON wrote.
func (n *Noise) UnmarshalJSON(b []byte) error {
	var v noiseJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	n.M0, n.est = v.M0, v.Est
	return nil
}
