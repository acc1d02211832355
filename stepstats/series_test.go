package stepstats

import (
	"reflect"
	"testing"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// steps are rank 0's records of two attempts (steps 1..4 at 64 samples a
// step, 0.5 s apart from t = 100; steps 5..7 at 128 samples a step, 1 s
// apart from t = 110), with rank 1's and a duplicate mixed in, in reverse.
func steps() []telemetry.StepRecord {
	var recs []telemetry.StepRecord
	for s := int64(1); s <= 7; s++ {
		r := telemetry.StepRecord{Attempt: 1, World: 1, Step: s, Time: 100 + 0.5*float64(s), GlobalBatch: 64, Loss: f64(float64(10 - s))}
		if s > 4 {
			r = telemetry.StepRecord{Attempt: 2, World: 2, Step: s, Time: 110 + float64(s-4), Samples: 64, Loss: f64(float64(10 - s))}
		}
		other := r
		other.Rank, other.Time = 1, 0
		recs = append([]telemetry.StepRecord{r, other}, recs...)
	}
	dup := recs[0]
	dup.GlobalBatch = 1000
	noLoss := telemetry.StepRecord{Attempt: 2, World: 2, Step: 8, Time: 115, Samples: 64}
	return append(recs, dup, noLoss)
}

func TestRateSeries(t *testing.T) {
	for _, c := range []struct {
		name string
		n    int
		want []Point
	}{
		{"a point a step", 100, []Point{
			{T: 1, V: 128, Attempt: 1}, {T: 1.5, V: 128, Attempt: 1}, {T: 2, V: 128, Attempt: 1},
			{T: 12, V: 128, Attempt: 2}, {T: 13, V: 128, Attempt: 2}, {T: 15, V: 64, Attempt: 2}}},
		{"groups of three steps", 3, []Point{
			{T: 2, V: 128, Attempt: 1}, {T: 15, V: 384.0 / 4, Attempt: 2}}},
		{"none", 0, nil},
	} {
		if got := RateSeries(steps(), 100, c.n); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	one := []telemetry.StepRecord{{Attempt: 1, Step: 1, Time: 5, GlobalBatch: 8}}
	if got := RateSeries(one, 0, 10); got != nil {
		t.Errorf("one step: %v, want no rate", got)
	}
}

func TestStepTimeSeries(t *testing.T) {
	for _, c := range []struct {
		name string
		n    int
		want []Point
	}{
		{"a point a step", 100, []Point{
			{T: 1, V: 0.5, Attempt: 1}, {T: 1.5, V: 0.5, Attempt: 1}, {T: 2, V: 0.5, Attempt: 1},
			{T: 12, V: 1, Attempt: 2}, {T: 13, V: 1, Attempt: 2}, {T: 15, V: 2, Attempt: 2}}},
		{"groups of three steps", 3, []Point{
			{T: 2, V: 0.5, Attempt: 1}, {T: 15, V: 4.0 / 3, Attempt: 2}}},
		{"none", 0, nil},
	} {
		if got := StepTimeSeries(steps(), 100, c.n); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestLossSeries(t *testing.T) {
	for _, c := range []struct {
		name string
		n    int
		want []Point
	}{
		{"a point a step", 100, []Point{
			{T: 0.5, V: 9, Attempt: 1}, {T: 1, V: 8, Attempt: 1}, {T: 1.5, V: 7, Attempt: 1}, {T: 2, V: 6, Attempt: 1},
			{T: 11, V: 5, Attempt: 2}, {T: 12, V: 4, Attempt: 2}, {T: 13, V: 3, Attempt: 2}}},
		{"pairs", 4, []Point{
			{T: 0.75, V: 8.5, Attempt: 1}, {T: 1.75, V: 6.5, Attempt: 1},
			{T: 11.5, V: 4.5, Attempt: 2}, {T: 13, V: 3, Attempt: 2}}},
		{"none", 0, nil},
	} {
		if got := LossSeries(steps(), 100, c.n); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
