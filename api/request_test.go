package api

import (
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/plugins"
)

func TestSelfLaunchingCommandsNeedTheirWorkerCount(t *testing.T) {
	ranged := Optimize{Policy: "adaptive", MinWorkers: 1, MaxWorkers: 4, TargetSamples: 1000}
	for _, c := range []struct {
		name string
		cmd  []string
		mode plugins.LaunchMode
		opt  Optimize
		bad  bool
	}{
		{"torchrun, a range, no {workers}", []string{"torchrun", "--nproc_per_node", "4", "train.py"}, "", ranged, true},
		{"torchrun, a range, {workers}", []string{"torchrun", "--nproc_per_node={workers}", "train.py"}, "", ranged, false},
		{"python -m torch.distributed.run, a range", []string{"python3", "-m", "torch.distributed.run", "train.py"}, "", ranged, true},
		{"--mode self, a range", []string{"./launch.sh"}, plugins.ModeSelf, ranged, true},
		{"torchrun, fixed", []string{"torchrun", "--nproc_per_node", "4", "train.py"}, "", Optimize{}, false},
		{"per-rank command, a range", []string{"python3", "train.py"}, "", ranged, false},
	} {
		r := RunRequest{Command: c.cmd, Mode: c.mode, Optimize: c.opt, Config: plugins.Config{Workers: 1, GlobalBatch: 4}}
		err := r.selfLaunched()
		if (err != nil) != c.bad || err != nil && !strings.Contains(err.Error(), "{workers}") {
			t.Errorf("%s: %v, want refused: %v (naming {workers})", c.name, err, c.bad)
		}
	}
}

// TestRangesNeedAMovingPolicy: whichever client sends it, a request with a
// range or several machine types and no moving policy is refused.
func TestRangesNeedAMovingPolicy(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  Optimize
		bad  bool
	}{
		{"no optimisation", Optimize{}, false},
		{"a fixed point", Optimize{MinWorkers: 2, MaxWorkers: 2, MinBatch: 64, MaxBatch: 64}, false},
		{"workers range, no policy", Optimize{MinWorkers: 1, MaxWorkers: 2}, true},
		{"batch range, fixed", Optimize{Policy: "fixed", MinBatch: 32, MaxBatch: 64}, true},
		{"two types, no policy", Optimize{Types: []string{"a", "b"}}, true},
		{"workers range, adaptive", Optimize{Policy: "adaptive", MinWorkers: 1, MaxWorkers: 2, MinBatch: 32, MaxBatch: 32, TargetSamples: 1000}, false},
	} {
		r := RunRequest{Command: []string{"python3", "train.py"}, Config: plugins.Config{Workers: 1, GlobalBatch: 32}, Optimize: c.opt}
		err := r.Validate()
		if (err != nil) != c.bad || err != nil && !strings.Contains(err.Error(), "need a moving policy") {
			t.Errorf("%s: %v, want refused: %v (saying a moving policy is needed)", c.name, err, c.bad)
		}
	}
}

// TestValidateRefusesReservedEnvAndBadRestarts: the variables Scavenger sets
// for each worker may not come with the request (scavctl and the daemon
// both refuse them, naming --env), nor may a negative --max-restarts.
func TestValidateRefusesReservedEnvAndBadRestarts(t *testing.T) {
	neg, many := -1, MaxMaxRestarts+1
	for _, c := range []struct {
		name string
		req  RunRequest
		want []string // parts of the error; none: valid
	}{
		{"plain", RunRequest{Env: []string{"PATH=/bin", "OMP_NUM_THREADS=2"}}, nil},
		{"job id", RunRequest{Env: []string{"SCAV_JOB_ID=x"}}, []string{"--env SCAV_JOB_ID: Scavenger sets SCAV_JOB_ID"}},
		{"rank and token", RunRequest{Env: []string{"RANK=5", "SCAV_TOKEN=t"}}, []string{"--env RANK", "--env SCAV_TOKEN"}},
		{"negative restarts", RunRequest{MaxRestarts: &neg}, []string{"--max-restarts -1"}},
		{"too many restarts", RunRequest{MaxRestarts: &many}, []string{"--max-restarts 101"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.req.Command, c.req.Config = []string{"/bin/true"}, plugins.Config{Workers: 1}
			err := c.req.Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v, want %q", err, w)
				}
			}
		})
	}
}

// TestValidateRefusesWhatNoJobCanHave (issue 21's last row, for a request
// that did not come through scavctl): negative amounts, a grace that would
// hold a stop for ever, faults settings out of range; every problem at once.
func TestValidateRefusesWhatNoJobCanHave(t *testing.T) {
	req := RunRequest{Command: []string{"/bin/true"}, Config: plugins.Config{Workers: 1}, Grace: Duration(1000000 * time.Hour),
		Optimize: Optimize{TargetSamples: -1, PriceUSDPerHour: -1, Deadline: Duration(-time.Hour), BudgetUSD: -2},
		Faults:   Faults{RestartWindow: Duration(-time.Second), StallTimeout: Duration(time.Millisecond), OnStall: "panic", OnNaN: "ignore"}}
	err := req.Validate()
	for _, want := range []string{"grace 1000000h0m0s: use 0 to 1h0m0s", "--target-samples -1: must not be negative", "--price -1: must not be negative",
		"--deadline -1h0m0s: must not be negative", "--budget -2: must not be negative", "--restart-window -1s", "--stall-timeout 1ms",
		`--on-stall "panic"`, `--on-nan "ignore"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %q", err, want)
		}
	}
	ok := RunRequest{Command: []string{"/bin/true"}, Config: plugins.Config{Workers: 1}, Grace: Duration(MaxGrace),
		Faults: Faults{RestartWindow: Duration(10 * time.Minute), StallTimeout: Duration(time.Minute), OnStall: StallRestart, OnNaN: NaNStop}}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate of a good request = %v", err)
	}
}

// TestWorkIsCountedAtAFixedBase: a target's base batch is the starting
// batch unless given, fixed when the job is made; without a target there
// is no work to count.
func TestWorkIsCountedAtAFixedBase(t *testing.T) {
	for _, c := range []struct {
		o     Optimize
		start int
		want  int
	}{
		{Optimize{TargetSamples: 1000}, 32, 32},
		{Optimize{TargetSamples: 1000, BaseBatch: 16}, 32, 16},
		{Optimize{}, 32, 0},
		{Optimize{TargetSamples: 1000}, 0, 0}, // the script's own batch: nothing to count at
	} {
		if got := c.o.Fixed(c.start).BaseBatch; got != c.want {
			t.Errorf("%+v.Fixed(%d).BaseBatch = %d, want %d", c.o, c.start, got, c.want)
		}
	}
	req := RunRequest{Command: []string{"/bin/true"}, Config: plugins.Config{Workers: 1}, Optimize: Optimize{BaseBatch: -2}}
	if err := req.Validate(); err == nil ||
		!strings.Contains(err.Error(), "--base-batch -2: must not be negative") {
		t.Errorf("Validate = %v, want the negative base batch named", err)
	}
}
