package plot

import (
	"math"
	"sort"

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
		ax.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	roomAbove(ax, room, a.Log)
}
