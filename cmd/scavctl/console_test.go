package main

import (
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// TestStatusLineLeft: the status line says the time and cost left with
// their intervals, counts them down with the steps the job makes, and
// never says nothing is left while the job runs past its forecast.
func TestStatusLineLeft(t *testing.T) {
	st := newStepStatus(plugins.Config{Workers: 1, GlobalBatch: 32}, true)
	st.plan("optimised", []api.Decision{{Time: time.Now(), Step: 10, PredictedStepS: 0.5, PredictedSteps: 100, PredictedS: 50, PredictedLoS: 40, PredictedHiS: 75,
		PredictedUSD: 0.05, PredictedUSDLo: 0.04, PredictedUSDHi: 0.075}})
	for s := int64(1); s <= 60; s++ {
		st.observe(telemetry.StepRecord{Rank: 0, World: 1, Step: s, Time: float64(s), Seconds: 1, GlobalBatch: 32})
	}
	// 50 steps left at 1 s a step (twice the predicted), not 50 s less the time since.
	if line := st.line(); !strings.Contains(line, "~50s left (40s–1m15s), ~$0.05 to finish ($0.04–$0.075)") {
		t.Errorf("status line %q", line)
	}
	for s := int64(61); s <= 200; s++ {
		st.observe(telemetry.StepRecord{Rank: 0, World: 1, Step: s, Time: float64(s), Seconds: 1, GlobalBatch: 32})
	}
	if line := st.line(); !strings.Contains(line, "past its forecast: more than 1s left") || strings.Contains(line, "~0s") {
		t.Errorf("past the forecast: %q", line)
	}
}
