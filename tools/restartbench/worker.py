"""A DDP worker for tools/bench-restart.sh, the same under any launcher.

A small MLP on random data (gloo, CPU). Every rank appends one line a step to
$BENCH_STEPS ("rank step unix_time pid"); rank 0 checkpoints every
--checkpoint-every steps into --dir, and every run starts from the newest
checkpoint there: so a restart by scavctl --max-restarts and one by
torchrun --max_restarts resume the same way, and the bench times only the
launchers. Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun and
scavctl set them.
"""

import argparse
import glob
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--checkpoint-every", type=int, default=25)
    p.add_argument("--dir", required=True)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    ckpts = sorted(glob.glob(os.path.join(args.dir, "ckpt-*.pt")))
    if ckpts:
        state = torch.load(ckpts[-1])
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    out = open(os.environ["BENCH_STEPS"], "a", buffering=1)
    for step in range(start + 1, args.steps + 1):
        x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        out.write(f"{rank} {step} {time.time():.6f} {os.getpid()}\n")
        if rank == 0 and step % args.checkpoint_every == 0:
            tmp = os.path.join(args.dir, f".ckpt-{step:08d}.tmp")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
            os.rename(tmp, os.path.join(args.dir, f"ckpt-{step:08d}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
