package prior

import (
	"math"
	"testing"
)

func TestMerge(t *testing.T) {
	a := Entry{Signature: "s", Type: "t", Points: []Point{{Nodes: 1, Replicas: 1, LocalBatch: 32, StepS: 1, SyncS: 0, Steps: 10}},
		Noise: []NoisePoint{{1, 1}}, RelaunchS: []float64{1, 2}}
	b := Entry{Signature: "s", Type: "t", Points: []Point{{Nodes: 1, Replicas: 1, LocalBatch: 32, StepS: 2, SyncS: 0, Steps: 30}, {Nodes: 1, Replicas: 2, LocalBatch: 16, StepS: 1, Steps: 20}},
		RelaunchS: []float64{3}}
	m := Merge(a, b)
	if len(m.Points) != 2 || math.Abs(m.Points[0].StepS-1.75) > 1e-12 || m.Points[0].Steps != 40 {
		t.Errorf("points %+v: want the shared configuration's steps-weighted mean 1.75 over 40 steps", m.Points)
	}
	if len(m.Noise) != 1 {
		t.Errorf("noise %+v: an entry without noise keeps the older one's", m.Noise)
	}
	if len(m.RelaunchS) != 3 {
		t.Errorf("relaunches %v", m.RelaunchS)
	}
	many := Entry{Signature: "s", Type: "t", RelaunchS: make([]float64, 40)}
	if got := len(Merge(many, b).RelaunchS); got != maxRelaunches {
		t.Errorf("%d relaunches kept, want %d", got, maxRelaunches)
	}
}

// pts are the measurements of a type whose step time is f(replicas, local).
func pts(f func(k int, m float64) float64) []Point {
	var out []Point
	for _, c := range [][2]float64{{1, 32}, {1, 64}, {2, 32}, {4, 32}, {4, 128}} {
		k := int(c[0])
		out = append(out, Point{Nodes: 1, Replicas: k, LocalBatch: c[1], StepS: f(k, c[1]), SyncS: 0.01 * float64(k-1), Steps: 20})
	}
	return out
}

func TestFor(t *testing.T) {
	slow := func(k int, m float64) float64 { return 0.02 + 0.002*m + 0.01*float64(k-1) }
	scaled := func(f float64) func(int, float64) float64 {
		return func(k int, m float64) float64 { return f * slow(k, m) }
	}
	entries := []Entry{
		{Signature: "me", Type: "a", Points: pts(slow), Noise: []NoisePoint{{100, 10}, {1000, 50}}, RelaunchS: []float64{10, 20}},
		{Signature: "x", Type: "a", Points: pts(slow)},
		{Signature: "x", Type: "b", Points: pts(scaled(0.5))},
		{Signature: "y", Type: "a", Points: pts(slow)},
		{Signature: "y", Type: "b", Points: pts(scaled(0.25))},
		{Signature: "z", Type: "c", Points: pts(slow)}, // no pair
	}
	p := For("me", entries)
	if len(p.Points["a"]) != 5 || len(p.Noise) != 2 || p.RelaunchS != 15 {
		t.Errorf("own: %d points, noise %v, relaunch %g", len(p.Points["a"]), p.Noise, p.RelaunchS)
	}
	r, ok := p.Speed[[2]string{"a", "b"}]
	want := (math.Log(0.5) + math.Log(0.25)) / 2
	if !ok || r.N != 2 || math.Abs(r.LogMean-want) > 0.02 || math.Abs(r.LogSD-math.Log(2)/math.Sqrt2) > 0.02 {
		t.Errorf("b over a: %+v, want mean %.3f sd %.3f over 2", r, want, math.Log(2)/math.Sqrt2)
	}
	if back := p.Speed[[2]string{"b", "a"}]; math.Abs(back.LogMean+r.LogMean) > 1e-12 {
		t.Errorf("a over b %+v is not the inverse of %+v", back, r)
	}
	if _, ok := p.Speed[[2]string{"a", "c"}]; ok {
		t.Error("a ratio from no signature that measured both")
	}
	if (&Prior{}).Empty() != true || p.Empty() {
		t.Error("Empty")
	}
}

func TestEntries(t *testing.T) {
	l := Learned{Types: map[string][]Point{"b": pts(func(int, float64) float64 { return 1 }), "a": nil}, RelaunchS: []float64{5}}
	old := []Entry{{Signature: "s", Type: "b", RelaunchS: []float64{1}}}
	es := Entries("s", l, old)
	if len(es) != 2 || es[0].Type != "a" || es[1].Type != "b" || len(es[1].RelaunchS) != 2 {
		t.Errorf("entries %+v", es)
	}
	if len(Entries("s", Learned{}, old)) != 0 {
		t.Error("a job that measured nothing stored something")
	}
}

func TestThin(t *testing.T) {
	var ps []NoisePoint
	for i := 1; i <= 1000; i++ {
		ps = append(ps, NoisePoint{Samples: float64(i), Phi: float64(i)})
	}
	got := Thin(ps, 10)
	if len(got) > 10 || got[0] != ps[0] || got[len(got)-1] != ps[999] {
		t.Fatalf("thinned to %v", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Samples <= got[i-1].Samples {
			t.Fatalf("not increasing: %v", got)
		}
	}
	if len(Thin(ps[:5], 10)) != 5 {
		t.Error("thinned a short curve")
	}
}
