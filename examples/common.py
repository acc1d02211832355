"""Shared parts of the example trainers: flags, process group, models, data, timing.

Nothing here imports scavenger: the examples differ only by their few
instrumentation lines, so that plain_ddp.py and cnn.py train the same model on
the same batches and their step times can be compared.

Ranks are started with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), as scavctl and torchrun set them; without WORLD_SIZE a script
runs as a world of one on a free local port.
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

# Running from a checkout: fall back on the repository's client when scavenger is
# not already importable (scavctl puts its own copy on PYTHONPATH first).
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

INPUT_SHAPES = {"mlp": (512,), "cnn": (3, 32, 32)}
CLASSES = 10


def parse_args(description: str) -> argparse.Namespace:
    """The examples' common flags."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=50, help="optimizer steps to run")
    p.add_argument("--batch-size", type=int, default=64,
                   help="global batch size when Scavenger does not set one")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    p.add_argument("--seed", type=int, default=0, help="seed of the model and the data")
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the step-time median")
    args = p.parse_args()
    if args.steps < 1:
        p.error("--steps must be at least 1")
    return args


def init_distributed() -> tuple:
    """Join the gloo process group from the environment; return (rank, world)."""
    if "WORLD_SIZE" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
    world = int(os.environ["WORLD_SIZE"])
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1 if world > 1 else max(1, os.cpu_count() or 1))
    dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=world)
    return dist.get_rank(), world


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(kind: str, seed: int) -> nn.Module:
    """The MLP (512-1024-1024-10) or the small CNN (2 conv + 2 fc on 3x32x32)."""
    torch.manual_seed(seed)
    if kind == "mlp":
        return nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                             nn.Linear(1024, CLASSES))
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, CLASSES))


def batches(kind: str, local_batch: int, seed: int, rank: int, pool: int = 8):
    """Endless synthetic batches: random inputs labelled by a fixed random teacher.

    Every rank draws its own inputs; the teacher is shared, so the task is
    learnable and the loss falls.
    """
    shape = INPUT_SHAPES[kind]
    teacher = torch.Generator().manual_seed(seed)
    weights = torch.randn(CLASSES, *shape, generator=teacher).flatten(1)
    data = torch.Generator().manual_seed(seed * 1000 + rank + 1)
    pairs = []
    for _ in range(pool):
        x = torch.randn(local_batch, *shape, generator=data)
        pairs.append((x, (x.flatten(1) @ weights.T).argmax(1)))
    while True:
        yield from pairs


class StepTimer:
    """Times each step with perf_counter: `with timer: ...` around one full step."""

    def __init__(self) -> None:
        self.times = []
        self._start = 0.0

    def __enter__(self) -> "StepTimer":
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.times.append(time.perf_counter() - self._start)

    def median(self, warmup: int) -> float:
        """Median step time after the first warmup steps (all steps when there are too few)."""
        kept = self.times[warmup:] or self.times
        return statistics.median(kept) if kept else 0.0


def finish(args: argparse.Namespace, timer: StepTimer, world: int, local_batch: int,
           loss: torch.Tensor) -> None:
    """Print the JSON summary line from rank 0 and leave the process group."""
    if dist.get_rank() == 0:
        print(json.dumps({"event": "summary", "steps": len(timer.times),
                          "median_step_s": round(timer.median(args.warmup), 6),
                          "world": world, "local_batch": local_batch,
                          "global_batch": local_batch * world,
                          "final_loss": round(loss.item(), 6)}), flush=True)
    dist.destroy_process_group()
