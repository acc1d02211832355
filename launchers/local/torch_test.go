package local

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/plugins"
)

const allReduceScript = `
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")  # env:// from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank={dist.get_rank()} world={dist.get_world_size()} local={os.environ['LOCAL_RANK']} sum={t.item():g}", flush=True)
dist.destroy_process_group()
`

// TestTorchAllReduce proves the environment contract is torchrun-compatible:
// two ranks started by the launcher form a gloo group with env:// and
// all-reduce.
func TestTorchAllReduce(t *testing.T) {
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import torch.distributed").Run(); err != nil {
		t.Skipf("no torch for %s: %v", python, err)
	}
	out := newOutput()
	spec := plugins.AttemptSpec{
		JobID: "torch", Attempt: 1,
		Command: []string{python, "-c", allReduceScript},
		Dir:     t.TempDir(),
		Env:     []string{"OMP_NUM_THREADS=1"},
		Config:  plugins.Config{Workers: 2, GlobalBatch: 4},
		Output:  out.add,
	}
	h, err := newLauncher(t, Options{}).Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	res := waitResult(t, h, 60*time.Second)
	if res.ExitCode != 0 {
		t.Fatalf("result %+v; stderr 0: %q; stderr 1: %q", res, out.get(0, plugins.Stderr), out.get(1, plugins.Stderr))
	}
	for r := 0; r < 2; r++ {
		want := fmt.Sprintf("rank=%d world=2 local=%d sum=3", r, r)
		if !out.has(r, plugins.Stdout, want) {
			t.Errorf("rank %d printed %q, want %q", r, out.get(r, plugins.Stdout), want)
		}
	}
}
