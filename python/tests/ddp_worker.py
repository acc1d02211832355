"""One rank of the 2-process DDP test: a small MLP whose steps go to SCAV_SOCKET.

Arguments: STEPS ACCUM. Each rank draws its own data, so local gradients differ.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

import scavenger.torch


def main() -> None:
    steps, accum = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tracker = scavenger.torch.instrument(model, opt)
    gen = torch.Generator().manual_seed(int(os.environ["RANK"]) + 1)
    for _ in range(steps):
        opt.zero_grad()
        for i in range(accum):
            x = torch.randn(16, 20, generator=gen)
            loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
            if i < accum - 1:
                with model.no_sync():
                    loss.backward()
            else:
                loss.backward()
        tracker.loss(loss)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
