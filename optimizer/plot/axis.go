package plot

import (
	"math"
	"sort"
	"strconv"

	"github.com/scavenger-ml/scavenger/optimizer/sim"
	"gonum.org/v1/plot"
)

// axisRange is how a panel's axis shows a set of values: from Lo to Hi,
// the values above Hi (far beyond the rest) at its edge, on a log scale
// when Hi is ten times Lo or more.
type axisRange struct {
	Lo, Hi float64
	Log    bool
}

// fitAxis is the range that shows vs without letting one far value squash
// the rest: with four values or more, those above the upper "far out" fence
// (the third quartile plus three interquartile ranges, and never below twice
// the third quartile) are left beyond Hi, unless keep (the chosen value) is
// one of them. The low end is never cut: the front lives there.
func fitAxis(vs []float64, keep float64) axisRange {
	if len(vs) == 0 {
		return axisRange{}
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	lo, hi := s[0], s[len(s)-1]
	if len(s) >= 4 {
		q1, q3 := sim.Quantile(s, 0.25), sim.Quantile(s, 0.75)
		fence := q3 + math.Max(3*(q3-q1), math.Abs(q3))
		hi = lo
		for _, v := range s {
			if v <= fence {
				hi = v
			}
		}
	}
	if keep > hi && keep <= s[len(s)-1] {
		hi = keep
	}
	return axisRange{Lo: lo, Hi: hi, Log: lo > 0 && hi/lo >= 10}
}

// edge is where the range draws a value beyond Hi: a little past it.
const edge = 0.08

// clamp is where the range draws v: v itself, or the edge past Hi.
func (a axisRange) clamp(v float64) float64 {
	if v > a.Hi {
		return a.at(edge)
	}
	return v
}

// beyond counts the values of vs above Hi.
func (a axisRange) beyond(vs []float64) int {
	n := 0
	for _, v := range vs {
		if v > a.Hi {
			n++
		}
	}
	return n
}

// at is the value frac of the range's span past Hi, on its scale.
func (a axisRange) at(frac float64) float64 {
	t, inv := a.scale()
	return inv(t(a.Hi) + frac*a.span())
}

// below is the value frac of the range's span below Lo, on its scale.
func (a axisRange) below(frac float64) float64 {
	t, inv := a.scale()
	return inv(t(a.Lo) - frac*a.span())
}

// span is Hi - Lo on the range's scale (never 0).
func (a axisRange) span() float64 {
	t, _ := a.scale()
	if s := t(a.Hi) - t(a.Lo); s > 0 {
		return s
	}
	return math.Max(math.Abs(t(a.Hi))/2, 1e-9)
}

// scale is the range's transform and its inverse.
func (a axisRange) scale() (func(float64) float64, func(float64) float64) {
	if a.Log {
		return math.Log, math.Exp
	}
	id := func(v float64) float64 { return v }
	return id, id
}

// apply sets ax to show the range, with room past the edge for labels or
// a legend (room: the part of the axis left free).
func (a axisRange) apply(ax *plot.Axis, room float64) {
	ax.Min, ax.Max = a.below(0.05), a.at(edge+0.04)
	if a.Log {
		ax.Scale = plot.LogScale{}
		ax.Tick.Marker = logTicks{}
	}
	roomAbove(ax, room, a.Log)
}

// logTicks marks a log axis at every 1..9 × 10^k in its range and labels
// enough of them to read it: 1, 2 and 5 × 10^k (every power of ten when
// the axis spans more than four decades; every mark when fewer than three
// would be labelled). gonum's LogTicks labels the powers of ten alone,
// which leaves a short axis with one label or none.
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) || !(max > min) {
		return nil
	}
	lo, hi := math.Floor(math.Log10(min)), math.Ceil(math.Log10(max))
	label := map[int]bool{1: true, 2: true, 5: true}
	if hi-lo > 4 {
		label = map[int]bool{1: true}
	}
	var ts []plot.Tick
	labelled := 0
	for e := lo; e <= hi; e++ {
		for m := 1; m <= 9; m++ {
			v := float64(m) * math.Pow(10, e)
			if v < min*(1-1e-9) || v > max*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if label[m] {
				t.Label = tickLabel(v)
				labelled++
			}
			ts = append(ts, t)
		}
	}
	if labelled < 3 {
		for i := range ts {
			ts[i].Label = tickLabel(ts[i].Value)
		}
	}
	return ts
}

// tickLabel writes a tick's value short: "0.05", "20", "5k", "2M".
func tickLabel(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	case v >= 1:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
