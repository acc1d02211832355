// Package prior is what earlier jobs teach a new one. A job's policy says
// what it learnt of its job signature (Learned: each machine type's
// measured configurations, the gradient noise scale along training, the
// measured relaunches); a store keeps it per owner, signature and machine
// type (daemon/models live, a map in the simulator); and For turns the
// store's entries into a new job's Prior: the same signature's
// measurements, noise and relaunch cost, and, across the other signatures,
// the measured speed ratios between machine types, which stand in for the
// price prior of a type the job has never run on. Everything here is pure.
package prior

import (
	"math"
	"sort"

	"github.com/scavenger-ml/scavenger/optimizer/perf"
)

// Point is one configuration's measured mean step and sync time, and the
// steps that measured it.
type Point struct {
	Nodes      int     `json:"nodes"`
	Replicas   int     `json:"replicas"`
	LocalBatch float64 `json:"local_batch"`
	StepS      float64 `json:"step_s"`
	SyncS      float64 `json:"sync_s"`
	Steps      float64 `json:"steps"`
}

// Perf is p as the step-time models take it.
func (p Point) Perf() perf.Point {
	return perf.Point{Nodes: p.Nodes, Replicas: p.Replicas, LocalBatch: p.LocalBatch, StepTime: p.StepS, SyncTime: math.Min(p.SyncS, p.StepS)}
}

// NoisePoint is the gradient noise scale Phi (in samples) after Samples
// scale-invariant samples of training (progress × M0).
type NoisePoint struct {
	Samples float64 `json:"samples"`
	Phi     float64 `json:"phi"`
}

// Learned is what one job learnt of its signature: per machine type the
// configurations it measured, the noise scale along its training, and the
// relaunches it measured.
type Learned struct {
	Types     map[string][]Point `json:"types,omitempty"`
	Noise     []NoisePoint       `json:"noise,omitempty"`
	RelaunchS []float64          `json:"relaunch_s,omitempty"`
}

// Empty reports whether l taught nothing.
func (l Learned) Empty() bool { return len(l.Types) == 0 && len(l.Noise) == 0 && len(l.RelaunchS) == 0 }

// Entry is one stored (signature, machine type): its measured points, and
// the signature's noise and relaunches as the newest job saw them.
type Entry struct {
	Signature string       `json:"signature"`
	Type      string       `json:"type"`
	Points    []Point      `json:"points,omitempty"`
	Noise     []NoisePoint `json:"noise,omitempty"`
	RelaunchS []float64    `json:"relaunch_s,omitempty"`
}

// maxRelaunches bounds the relaunches an entry keeps (the newest).
const maxRelaunches = 16

// Entries splits what a job with signature sig learnt into one entry per
// machine type, each merged over what old holds for it (Merge); a job that
// measured no type adds nothing.
func Entries(sig string, l Learned, old []Entry) []Entry {
	var out []Entry
	types := make([]string, 0, len(l.Types))
	for typ := range l.Types {
		types = append(types, typ)
	}
	sort.Strings(types)
	for _, typ := range types {
		e := Entry{Signature: sig, Type: typ, Points: l.Types[typ], Noise: l.Noise, RelaunchS: l.RelaunchS}
		for _, o := range old {
			if o.Signature == sig && o.Type == typ {
				e = Merge(o, e)
			}
		}
		out = append(out, e)
	}
	return out
}

// Merge folds the newer entry b into a of the same signature and type:
// their points, a configuration measured by both weighted by its steps;
// b's noise when it has any (the newer run's); their relaunches, the
// newest kept.
func Merge(a, b Entry) Entry {
	out := Entry{Signature: b.Signature, Type: b.Type, Noise: a.Noise}
	if len(b.Noise) > 0 {
		out.Noise = b.Noise
	}
	type key struct {
		n, k int
		m    float64
	}
	at := map[key]int{}
	for _, p := range append(append([]Point(nil), a.Points...), b.Points...) {
		k := key{p.Nodes, p.Replicas, p.LocalBatch}
		i, ok := at[k]
		if !ok {
			at[k] = len(out.Points)
			out.Points = append(out.Points, p)
			continue
		}
		q := &out.Points[i]
		w := q.Steps + p.Steps
		if w > 0 {
			q.StepS = (q.StepS*q.Steps + p.StepS*p.Steps) / w
			q.SyncS = (q.SyncS*q.Steps + p.SyncS*p.Steps) / w
		}
		q.Steps = w
	}
	out.RelaunchS = append(append([]float64(nil), a.RelaunchS...), b.RelaunchS...)
	if n := len(out.RelaunchS); n > maxRelaunches {
		out.RelaunchS = out.RelaunchS[n-maxRelaunches:]
	}
	return out
}

// Ratio is the measured step-time ratio of one machine type over another
// (its log's mean and standard deviation over N signatures).
type Ratio struct {
	LogMean float64 `json:"log_mean"`
	LogSD   float64 `json:"log_sd"`
	N       int     `json:"n"`
}

// Prior is what earlier jobs tell a new one.
type Prior struct {
	// Points are the same signature's measurements by machine type.
	Points map[string][]Point `json:"points,omitempty"`
	// Noise is the same signature's noise scale along training.
	Noise []NoisePoint `json:"noise,omitempty"`
	// RelaunchS is the same signature's mean measured relaunch (0: none).
	RelaunchS float64 `json:"relaunch_s,omitempty"`
	// Speed is, over the other signatures that measured both types of a
	// pair, the step-time ratio of the second over the first.
	Speed map[[2]string]Ratio `json:"-"`
}

// Empty reports whether p tells nothing.
func (p *Prior) Empty() bool {
	return p == nil || len(p.Points) == 0 && len(p.Noise) == 0 && p.RelaunchS == 0 && len(p.Speed) == 0
}

// For is the prior of a job with signature sig from a store's entries: the
// entries of sig give its points, noise and relaunch cost; those of every
// other signature the speed ratios between the types each measured (see
// ratio).
func For(sig string, entries []Entry) *Prior {
	p := &Prior{Points: map[string][]Point{}, Speed: map[[2]string]Ratio{}}
	var relaunches []float64
	others := map[string]map[string][]Point{}
	for _, e := range entries {
		if e.Signature == sig {
			p.Points[e.Type] = append(p.Points[e.Type], e.Points...)
			if len(e.Noise) > len(p.Noise) {
				p.Noise = e.Noise
			}
			if len(e.RelaunchS) > len(relaunches) {
				relaunches = e.RelaunchS
			}
			continue
		}
		if len(e.Points) > 0 {
			if others[e.Signature] == nil {
				others[e.Signature] = map[string][]Point{}
			}
			others[e.Signature][e.Type] = append(others[e.Signature][e.Type], e.Points...)
		}
	}
	for _, r := range relaunches {
		p.RelaunchS += r / float64(len(relaunches))
	}
	logs := map[[2]string][]float64{}
	for _, types := range others {
		names := make([]string, 0, len(types))
		for t := range types {
			names = append(names, t)
		}
		sort.Strings(names)
		for i, a := range names {
			for _, b := range names[i+1:] {
				if l, ok := ratio(types[a], types[b]); ok {
					logs[[2]string{a, b}] = append(logs[[2]string{a, b}], l)
					logs[[2]string{b, a}] = append(logs[[2]string{b, a}], -l)
				}
			}
		}
	}
	for pair, ls := range logs {
		var r Ratio
		r.N = len(ls)
		for _, l := range ls {
			r.LogMean += l / float64(r.N)
		}
		if r.N > 1 {
			var ss float64
			for _, l := range ls {
				ss += (l - r.LogMean) * (l - r.LogMean)
			}
			r.LogSD = math.Sqrt(ss / float64(r.N-1))
		}
		p.Speed[pair] = r
	}
	return p
}

// ratio is the mean log step-time ratio of type b over type a of one
// signature: each type's model fitted on its points (perf.Fit), compared at
// every configuration either measured where both predict it.
func ratio(a, b []Point) (float64, bool) {
	fa, err := perf.Fit(perfPoints(a))
	if err != nil {
		return 0, false
	}
	fb, err := perf.Fit(perfPoints(b))
	if err != nil {
		return 0, false
	}
	var sum float64
	var n int
	for _, p := range append(append([]Point(nil), a...), b...) {
		x, y := fa.StepTime(p.Nodes, p.Replicas, p.LocalBatch), fb.StepTime(p.Nodes, p.Replicas, p.LocalBatch)
		if x > 0 && y > 0 && !math.IsInf(x, 0) && !math.IsInf(y, 0) {
			sum += math.Log(y / x)
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}

func perfPoints(ps []Point) []perf.Point {
	out := make([]perf.Point, len(ps))
	for i, p := range ps {
		out[i] = p.Perf()
	}
	return out
}

// Thin keeps at most n of the noise points, spread evenly in log progress
// (the first and last always kept).
func Thin(ps []NoisePoint, n int) []NoisePoint {
	if len(ps) <= n || n < 2 {
		return ps
	}
	lo, hi := math.Log(math.Max(ps[0].Samples, 1e-300)), math.Log(math.Max(ps[len(ps)-1].Samples, 1e-300))
	out := []NoisePoint{ps[0]}
	next := 1
	for i := 1; i < len(ps)-1; i++ {
		at := lo + (hi-lo)*float64(next)/float64(n-1)
		if math.Log(math.Max(ps[i].Samples, 1e-300)) >= at {
			out = append(out, ps[i])
			for next < n-1 && lo+(hi-lo)*float64(next)/float64(n-1) <= math.Log(ps[i].Samples) {
				next++
			}
		}
	}
	return append(out, ps[len(ps)-1])
}
