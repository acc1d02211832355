"""A DDP script that knows nothing of Scavenger's python client: it follows
only the conventions of `scavctl run --checkpoint-signal`: on SIGUSR1 it
saves its state into $SCAV_CHECKPOINT_DIR at the next step boundary and exits
0; it resumes from $SCAV_RESTORE when that is set. Progress goes to stderr as
tqdm draws it (carriage returns, no newlines until the end), which is all
Scavenger sees of its speed. --steps is the total across relaunches.
"""

import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=64, help="global batch")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    restore = os.environ.get("SCAV_RESTORE", "")
    if restore:
        state = torch.load(os.path.join(restore, "state.pt") if os.path.isdir(restore) else restore)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
    stop = []
    signal.signal(signal.SIGUSR1, lambda *_: stop.append(True))
    local = max(1, args.batch // world)
    start = last_draw = time.time()
    while step < args.steps:
        x = torch.randn(local, 256)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        now = time.time()
        if rank == 0 and (now - last_draw >= 0.1 or step == args.steps):  # tqdm's mininterval
            rate = step / max(now - start, 1e-9)
            sys.stderr.write(f"\r{100 * step // args.steps:3d}%|##| {step}/{args.steps} [00:01<00:01, {rate:.2f}it/s]")
            sys.stderr.flush()
            last_draw = now
        flag = torch.tensor([1.0 if stop else 0.0])
        dist.all_reduce(flag)  # every rank stops at the same step
        if flag.item() > 0:
            break
    if rank == 0:
        sys.stderr.write("\n")
        ckpt = os.environ["SCAV_CHECKPOINT_DIR"]
        tmp = os.path.join(ckpt, "state.pt.tmp")
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
        os.replace(tmp, os.path.join(ckpt, "state.pt"))
        print(f"saved step {step} of {args.steps}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
