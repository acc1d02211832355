package perf

import (
	"errors"
	"testing"
)

func TestMarshalRoundTrip(t *testing.T) {
	p := Pollux{AlphaC: 0.01, BetaC: 0.001, AlphaR: 0.005, BetaR: 0.001, AlphaN: 0.03, BetaN: 0.002, Gamma: 1.2, Delta: 1.1}
	tests := []Model{
		p,
		Scavenger{AlphaC: 1, BetaC: 2, AlphaS: 3, BetaS: 4},
		Measured{Nodes: 2, Replicas: 8, LocalBatch: 32, Step: 0.5},
		Transferred{Ref: p, Factor: 1.5},
		&Fitted{Model: p},
	}
	for _, m := range tests {
		data, err := Marshal(m)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		got, err := Unmarshal(data)
		if err != nil {
			t.Fatalf("%T: %v (%s)", m, err, data)
		}
		for _, q := range [][3]float64{{1, 4, 16}, {2, 8, 32}, {4, 32, 64}} {
			a, b := m.StepTime(int(q[0]), int(q[1]), q[2]), got.StepTime(int(q[0]), int(q[1]), q[2])
			if a != b {
				t.Errorf("%T at %v: %g after round trip, want %g", m, q, b, a)
			}
		}
	}
	if _, err := Unmarshal([]byte(`{"form":"cubic","params":{}}`)); !errors.Is(err, ErrUnknownForm) {
		t.Errorf("unknown form: %v", err)
	}
	if _, err := Unmarshal([]byte(`{`)); err == nil {
		t.Error("bad JSON accepted")
	}
}
