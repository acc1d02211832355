package control

import (
	"math"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/optimizer/policy"
	"github.com/scavenger-ml/scavenger/plugins"
)

// runningJob is a job that runs at cfg in attempt 3.
type runningJob struct{ cfg plugins.Config }

func (j runningJob) Current() (int, plugins.Config) { return 3, j.cfg }
func (runningJob) LastStep() int64                  { return 0 }
func (runningJob) SetNoise(float64)                 {}

// TestRechooseAfterTheMarketChanges: a cost-optimised job that measured
// types a and b runs on a, the cheaper per step at spot prices; when a's
// spot market goes (a pre-emption blocklisted it) the controller re-chooses
// over the offers now and moves to b on spot — and with no change in the
// offers it keeps its decision.
func TestRechooseAfterTheMarketChanges(t *testing.T) {
	offers := []plugins.Offer{{Type: "a", Slots: 1, OnDemandUSD: 0.10, SpotUSD: 0.01}, {Type: "b", Slots: 1, OnDemandUSD: 0.2, SpotUSD: 0.04}}
	j := api.Job{ID: "j", Config: plugins.Config{Workers: 1, GlobalBatch: 32, MachineType: "a", Market: plugins.MarketSpot, LRScale: 1},
		Optimize: api.Optimize{Policy: "full", Objective: "cost", MinWorkers: 1, MaxWorkers: 1, MinBatch: 32, MaxBatch: 32,
			TargetSamples: 32 * 10000, Types: []string{"a", "b"}, Spot: true}}
	c, err := New(j, offers, runningJob{j.Config}, make(chan Verdict, 1), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if got := len(c.cloud.cur.Spec.Candidates); got != 2 || c.cloud.cur.Markets["a"] != plugins.MarketSpot {
		t.Fatalf("search space %+v, want a and b on spot", c.cloud.cur)
	}
	a := c.cloud.cur.Candidate(j.Config, "a")
	b := a
	b.Type = "b"
	for _, o := range []policy.Observation{
		{ElapsedS: 2, Config: a, Steps: 20, StepTime: 0.1, Progress: 20},
		{ElapsedS: 4, Config: b, Steps: 20, StepTime: 0.05, Progress: 40},
		{ElapsedS: 6, Config: a, Steps: 20, StepTime: 0.1, Progress: 60},
	} {
		if _, err := c.loop.Pol.Observe(o); err != nil {
			t.Fatal(err)
		}
	}
	c.reported = true
	if _, ok := c.Rechoose("nothing changed", true); ok {
		t.Error("re-chose with the same offers")
	}
	// What the job had spent goes with the decision: a's machine, ended
	// after 10 s, billed its 60 s minimum, whatever the attempt's bill
	// says of when.
	now := time.Unix(5000, 0)
	c.cloud.now = func() time.Time { return now }
	ended := now.Add(-5 * time.Second)
	c.SetCharges([]plugins.Charge{{Instance: "i-a", Type: "a", Market: plugins.MarketSpot, USDPerHour: 0.36,
		Start: ended.Add(-10 * time.Second), End: &ended, Granularity: time.Second, Minimum: time.Minute}})
	c.SetOffers([]plugins.Offer{{Type: "a", Slots: 1, OnDemandUSD: 0.10}, {Type: "b", Slots: 1, OnDemandUSD: 0.2, SpotUSD: 0.04}})
	dec, ok := c.Rechoose("pre-empted", true)
	if !ok {
		t.Fatal("no re-choice after a's spot market went")
	}
	want := plugins.Config{Workers: 1, GlobalBatch: 32, MachineType: "b", Market: plugins.MarketSpot, Nodes: 1, LRScale: 1}
	if dec.To != want || dec.Phase != api.PhaseOptimised {
		t.Errorf("re-chose %+v (%s: %s), want %+v", dec.To, dec.Phase, dec.Reason, want)
	}
	if dec.PredictedUSD <= 0 || len(dec.Candidates) != 2 {
		t.Errorf("decision without its predictions: %+v", dec)
	}
	if math.Abs(dec.SpentUSD-0.006) > 1e-12 {
		t.Errorf("decision's spent $%g, want $0.006 (60 s billed at $0.36/h)", dec.SpentUSD)
	}
}
