package policy

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/scavenger-ml/scavenger/optimizer/perf"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
)

// typeSpread is the prior spread (one standard deviation of the log) of a
// never-measured machine type's speed per GPU around its price ratio to a
// measured type: the market prices GPU types roughly by what they deliver,
// but how much of a newer GPU's speed a given model can use varies, so the
// 90 % interval spans a factor of three either side.
var typeSpread = math.Log(3) / perf.Z90

// typeModels are the step-time models of every type that can be predicted.
type typeModels struct {
	models map[string]predict.StepTimer
	// fitted are the types predicted by a model fitted on their own
	// measurements (at least two configurations; this job's or, for its
	// signature, earlier jobs').
	fitted []string
	// kinds says how each type is predicted: "fit" (measured by this
	// job, earlier jobs' measurements included), "stored" (earlier jobs'
	// alone), "ratio" (another type's model at the speed ratio other
	// signatures measured) or "prior" (at its price ratio).
	kinds map[string]string
}

// fit models every type: its own guarded fit (perf.Fit) on what this job
// and earlier jobs of its signature measured of it (stored, see learn.go)
// — compute curves differ in shape between GPU types, so no scale factor
// carries one type's shape to another — and, for a type nobody measured,
// the best-measured type's predictions scaled by the speed ratio other
// signatures measured between the two, or by their price ratio per GPU,
// with the spread of either (priored). Configurations this job measured
// predict their measured step time.
func (t *tracker) fit() (typeModels, error) {
	ms := typeModels{models: map[string]predict.StepTimer{}, kinds: map[string]string{}}
	fits := map[string]*perf.Fitted{}
	var ref string
	for _, typ := range t.types {
		own := t.points(typ)
		pts := append(own, t.storedPoints(typ, own)...)
		if len(pts) == 0 {
			continue
		}
		f, err := perf.Fit(pts)
		if err != nil {
			return typeModels{}, fmt.Errorf("fit type %s: %w", typ, err)
		}
		fits[typ] = f
		if ref == "" || f.Configs > fits[ref].Configs {
			ref = typ
		}
		ms.kinds[typ] = "fit"
		if len(own) == 0 {
			ms.kinds[typ] = "stored"
		}
	}
	for _, typ := range t.types {
		f, ok := fits[typ]
		switch {
		case ok:
			ms.models[typ] = t.overlay(typ, f)
			if f.Configs >= 2 {
				ms.fitted = append(ms.fitted, typ)
			}
		case ref != "":
			p, kind := t.transfer(fits[ref], ref, typ)
			ms.models[typ], ms.kinds[typ] = p, kind
		}
	}
	return ms, nil
}

// transfer is the model of typ, never measured, from type ref's: at the
// speed ratio other signatures measured between them, with their spread
// (a Student t interval over as few signatures as there are; one alone
// says nothing of the spread, which stays the price prior's), or else at
// the ratio of their prices per GPU with typeSpread.
func (t *tracker) transfer(f *perf.Fitted, ref, typ string) (priored, string) {
	if p := t.spec.Prior; p != nil {
		if r, ok := p.Speed[[2]string{ref, typ}]; ok && r.N > 0 {
			w := perf.Z90 * typeSpread
			if r.N > 1 {
				w = distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(r.N - 1)}.Quantile(0.95) * r.LogSD * math.Sqrt(1+1/float64(r.N))
			}
			return priored{ref: f, factor: math.Exp(r.LogMean), w: w}, "ratio"
		}
	}
	return priored{ref: f, factor: t.perGPUPrice(ref) / t.perGPUPrice(typ), w: perf.Z90 * typeSpread}, "prior"
}

// perGPUPrice is the $/hour of one GPU of typ: its node price over the
// most workers one node of it holds among the candidates.
func (t *tracker) perGPUPrice(typ string) float64 {
	g := 1
	for _, c := range t.spec.Candidates {
		if c.Type == typ && c.Nodes == 1 {
			g = max(g, c.Workers)
		}
	}
	return t.spec.Prices[typ] / float64(g)
}

// priored predicts a type never measured: the reference type's prediction
// scaled by factor (a measured speed ratio, or the price ratio: speed in
// proportion to price), its interval widened by e^±w.
type priored struct {
	ref    predict.Ranged
	factor float64
	w      float64
}

// StepTime implements predict.StepTimer.
func (p priored) StepTime(nodes, replicas int, local float64) float64 {
	return p.factor * p.ref.StepTime(nodes, replicas, local)
}

// Interval implements predict.Ranged.
func (p priored) Interval(nodes, replicas int, local float64) (lo, pt, hi float64) {
	lo, pt, hi = p.ref.Interval(nodes, replicas, local)
	w := math.Exp(p.w)
	return lo * p.factor / w, pt * p.factor, hi * p.factor * w
}

// measuredOver wraps a model so that measured configurations predict their
// measured step time (an interval of zero width): this job's measurements,
// and where it has none, earlier runs' (stored, at this job's level).
type measuredOver struct {
	base predict.StepTimer
	at   map[[2]int]map[float64]float64
}

// StepTime implements predict.StepTimer.
func (m measuredOver) StepTime(nodes, replicas int, local float64) float64 {
	if v, ok := m.at[[2]int{nodes, replicas}][local]; ok {
		return v
	}
	return m.base.StepTime(nodes, replicas, local)
}

// Interval implements predict.Ranged.
func (m measuredOver) Interval(nodes, replicas int, local float64) (lo, pt, hi float64) {
	if v, ok := m.at[[2]int{nodes, replicas}][local]; ok {
		return v, v, v
	}
	if r, ok := m.base.(predict.Ranged); ok {
		return r.Interval(nodes, replicas, local)
	}
	v := m.base.StepTime(nodes, replicas, local)
	return v, v, v
}

// overlay is base under typ's measured step times (see measuredOver). A
// configuration earlier runs measured (the store keeps one point for it,
// their mean) predicts that, scaled to this job's level as the fit's stored
// points are: a measurement of the same command on the same type is nearer
// the truth than a model fitted through every configuration (a live cost
// job started at batch 32 because the fit put batch 128 13 % above what a
// run had measured there).
func (t *tracker) overlay(typ string, base predict.StepTimer) predict.StepTimer {
	at := map[[2]int]map[float64]float64{}
	set := func(nodes, replicas int, local, step float64) {
		k := [2]int{nodes, replicas}
		if at[k] == nil {
			at[k] = map[float64]float64{}
		}
		at[k][local] = step
	}
	for _, p := range t.storedPoints(typ, t.points(typ)) {
		if p.StepTime > 0 && !math.IsInf(p.StepTime, 0) {
			set(p.Nodes, p.Replicas, p.LocalBatch, p.StepTime)
		}
	}
	for c, m := range t.meas {
		if c.Type == typ {
			step, _ := t.stepNow(m)
			set(c.Nodes, c.Workers, c.Local(), step)
		}
	}
	return measuredOver{base: base, at: at}
}
