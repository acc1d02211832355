package api

import (
	"strings"
	"testing"

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
