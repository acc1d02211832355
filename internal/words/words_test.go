package words

import (
	"testing"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
)

func TestCount(t *testing.T) {
	for _, tt := range []struct {
		n    int
		noun string
		want string
	}{{1, "worker", "1 worker"}, {2, "worker", "2 workers"}, {0, "relaunch", "0 relaunches"}, {1, "relaunch", "1 relaunch"},
		{3, "node", "3 nodes"}, {2, "process", "2 processes"}} {
		if got := Count(tt.n, tt.noun); got != tt.want {
			t.Errorf("Count(%d, %q) = %q, want %q", tt.n, tt.noun, got, tt.want)
		}
	}
	if got := Count(int64(1), "step"); got != "1 step" {
		t.Errorf("Count(int64 1) = %q", got)
	}
}

func TestNotationAndConfig(t *testing.T) {
	for _, tt := range []struct {
		cfg            plugins.Config
		notation, text string
	}{
		{plugins.Config{Workers: 2, GlobalBatch: 128}, "2x128", "2 workers × batch 128"},
		{plugins.Config{Workers: 1}, "1x-", "1 worker × the script's own batch"},
		{plugins.Config{Workers: 2, GlobalBatch: 64, MachineType: "loc.half", Market: "spot"}, "loc.half 2x64", "2 workers × batch 64 on loc.half (spot)"},
		{plugins.Config{Workers: 8, GlobalBatch: 1024, MachineType: "aws", Nodes: 2}, "aws 8x1024 (2 nodes)", "8 workers × batch 1024 on aws over 2 nodes"},
	} {
		if got := ConfigNotation(tt.cfg); got != tt.notation {
			t.Errorf("ConfigNotation(%+v) = %q, want %q", tt.cfg, got, tt.notation)
		}
		if got := Config(tt.cfg); got != tt.text {
			t.Errorf("Config(%+v) = %q, want %q", tt.cfg, got, tt.text)
		}
	}
}

func TestAbout(t *testing.T) {
	for s, want := range map[float64]string{0.4: "~0 s", 20: "~20 s", 89: "~89 s", 200: "~3 min", 5400: "~1.5 h", 7200: "~2 h", 3 * 86400: "~3 days", -1: "?"} {
		if got := About(s); got != want {
			t.Errorf("About(%v) = %q, want %q", s, got, want)
		}
	}
}

func TestDecision(t *testing.T) {
	k1b64 := plugins.Config{Workers: 1, GlobalBatch: 64}
	k2b256 := plugins.Config{Workers: 2, GlobalBatch: 256}
	k2b128 := plugins.Config{Workers: 2, GlobalBatch: 128}
	cands := []api.CandidatePrediction{
		{Type: "local", Workers: 1, Batch: 64, TotalS: 240, TotalUSD: 0.067},
		{Type: "local", Workers: 2, Batch: 128, TotalS: 190, TotalUSD: 0.05, Chosen: true},
	}
	tests := []struct {
		name      string
		d         api.Decision
		showsCost bool
		want      string
	}{
		{"warm-up", api.Decision{Phase: api.PhaseWarmup, From: k1b64, To: k1b64},
			false, "waiting for a steady estimate of the gradient noise before trying other configurations"},
		{"a valued probe, in seconds",
			api.Decision{Phase: api.PhaseProbing, From: k1b64, To: k2b256, PredictedStepS: 0.4,
				Probe: &api.ProbeValue{Steps: 50, Gain: 45, Cost: 5, Chance: 0.92, GainUnit: "s"}},
			false, "trying 2 workers × batch 256 for ~20 s to measure it; expected to save ~40 s (a 92% chance it beats the current best)"},
		{"a probe of the design, before any model: its steps",
			api.Decision{Phase: api.PhaseProbing, From: k1b64, To: k2b256,
				Probe: &api.ProbeValue{Steps: 50, Gain: 0.02, Cost: 0.01, Chance: 0.5, GainUnit: "$", Design: true}},
			false, "trying 2 workers × batch 256 for 50 steps to measure it; expected to pay for itself (a 50% chance it beats the current best); the model of its machine type needs this point"},
		{"a probe valued in dollars, with a price",
			api.Decision{Phase: api.PhaseProbing, From: k1b64, To: k2b256, Probe: &api.ProbeValue{Steps: 1, Gain: 0.03, Cost: 0.01, GainUnit: "$"}},
			true, "trying 2 workers × batch 256 for 1 step to measure it; expected to save ~$0.02"},
		{"measuring longer", api.Decision{Phase: api.PhaseProbing, From: k2b256, To: k2b256, Probe: &api.ProbeValue{Steps: 12}},
			false, "measuring 2 workers × batch 256 a little longer for 12 steps"},
		{"a move, against staying, no cost without a price",
			api.Decision{Phase: api.PhaseOptimised, From: k1b64, To: k2b128, PredictedS: 190, PredictedUSD: 0.05, Candidates: cands},
			false, "moving to 2 workers × batch 128: predicted to finish in ~3 min, against ~4 min staying at 1 worker × batch 64"},
		{"a provisional move with a price, throughput only",
			api.Decision{Phase: api.PhaseOptimised, From: k1b64, To: k2b128, PredictedS: 190, PredictedUSD: 0.05, Provisional: true, ThroughputOnly: true},
			true, "moving to 2 workers × batch 128: predicted to finish in ~3 min for ~$0.05; provisional, until the forecast of the gradient noise settles (no gradient statistics: judged by throughput alone)"},
		{"a stay: the best", api.Decision{Phase: api.PhaseOptimised, From: k2b128, To: k2b128, PredictedS: 190, Candidates: cands},
			false, "staying at 2 workers × batch 128: predicted the best (finish in ~3 min)"},
		{"a stay: a move would not pay",
			api.Decision{Phase: api.PhaseOptimised, From: k1b64, To: k1b64, Candidates: cands},
			false, "staying at 1 worker × batch 64: the best other, 2 workers × batch 128, is predicted to finish in ~3 min against ~4 min here: too little to pay for a relaunch"},
		{"a stay: the search is over", api.Decision{Phase: api.PhaseOptimised, From: k1b64, To: k1b64},
			false, "staying at 1 worker × batch 64: the search is over"},
		{"a cloud move names the machine type",
			api.Decision{Phase: api.PhaseOptimised, From: plugins.Config{Workers: 1, GlobalBatch: 64, MachineType: "loc.half"},
				To: plugins.Config{Workers: 1, GlobalBatch: 64, MachineType: "loc.full", Market: "spot"}, PredictedS: 100, PredictedUSD: 0.001},
			true, "moving to 1 worker × batch 64 on loc.full (spot): predicted to finish in ~2 min for ~$0.001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Decision(tt.d, tt.showsCost); got != tt.want {
				t.Errorf("Decision =\n  %q\nwant\n  %q", got, tt.want)
			}
		})
	}
}

func TestRenotateAndParse(t *testing.T) {
	if got := Renotate("commit: stay: least cost: aws:1:4:512, 902 s; probe local:1:2:256 and aws:2:8:4096"); got != "commit: stay: least cost: aws 4x512, 902 s; probe local 2x256 and aws 8x4096 (2 nodes)" {
		t.Errorf("Renotate = %q", got)
	}
	for in, want := range map[string][3]any{"aws 4x512": {"aws", 4, 512}, "aws:4:512": {"aws", 4, 512}, "2x64": {"", 2, 64}} {
		typ, k, b, err := ParseNotation(in, false)
		if err != nil || typ != want[0] || k != want[1] || b != want[2] {
			t.Errorf("ParseNotation(%q) = %q %d %d %v, want %v", in, typ, k, b, err, want)
		}
	}
	for _, in := range []string{"2x64", "aws 4", "aws x512", "aws 0x512", "aws:4"} {
		if _, _, _, err := ParseNotation(in, true); err == nil {
			t.Errorf("ParseNotation(%q) accepted", in)
		}
	}
}
