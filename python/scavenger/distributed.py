"""DDP for the world size of this attempt, and the resumable sampler (needs torch).

Every attempt of a Scavenger job is a fresh launch with its own WORLD_SIZE, so a
script joins the process group and wraps its model once at start-up:

    model, rank, world = scavenger.distributed.setup(model)
    sampler = scavenger.distributed.ResumableDistributedSampler(dataset, local_batch)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler)
    for x, y in loader:          # the rest of the current epoch
        ...
        optimizer.step()
        sampler.advance()        # the whole job consumed one global batch
"""

import os
import socket
import sys
from typing import Any, Iterator, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Sampler

import scavenger
from .data import SampleOrder

__all__ = ["setup", "shutdown", "any_rank", "ResumableDistributedSampler"]


def setup(model: torch.nn.Module, *, backend: Optional[str] = None
          ) -> Tuple[DistributedDataParallel, int, int]:
    """Join the process group from the environment, wrap model in DDP; return (ddp, rank, world).

    The group comes from torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT), as every Scavenger launcher sets them; without WORLD_SIZE the
    process is a world of one on a free local port. backend defaults to nccl
    when CUDA is available, else gloo. With CUDA the model moves to the device
    LOCAL_RANK names. An existing default group is reused. Without
    OMP_NUM_THREADS, torch gets one thread per rank when world > 1 and all
    cores otherwise (torch defaults to one on some builds).
    """
    if not dist.is_initialized():
        _init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if torch.cuda.is_available():
        device = scavenger.local_rank()
        torch.cuda.set_device(device)
        return DistributedDataParallel(model.to(device), device_ids=[device]), rank, world
    return DistributedDataParallel(model), rank, world


def shutdown() -> None:
    """Leave the default process group, if joined (at the end of an attempt)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def finish(code: int = 0) -> None:
    """End the attempt's process now: leave the process group, flush the
    telemetry and the output, and exit with code without running the
    interpreter's teardown, where torch 1.13 with gloo sometimes aborts
    ("terminate called without an active exception") after all work is done."""
    shutdown()
    scavenger.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def any_rank(flag: bool) -> bool:
    """True on every rank when flag is true on any rank (one tiny all-reduce; flag without a group).

    Use it for decisions every rank must take at the same step, such as
    stopping to checkpoint when only some ranks have heard the request yet.
    """
    if not dist.is_initialized():
        return bool(flag)
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    value = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def _init_process_group(backend: Optional[str]) -> None:
    """init_process_group from the environment, defaulting to a local world of one."""
    if "WORLD_SIZE" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    world = scavenger.world_size()
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1 if world > 1 else max(1, os.cpu_count() or 1))
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    dist.init_process_group(backend, rank=scavenger.rank(), world_size=world)


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ResumableDistributedSampler(Sampler):
    """A batch sampler over a map-style dataset that resumes at the exact sample.

    Pass it as DataLoader(dataset, batch_sampler=sampler). One iteration yields
    this rank's local batches (lists of local_batch indices) for the rest of the
    current epoch; call advance() after every optimizer step, and iterate again
    for the next epoch. See scavenger.data for the order: global batches are
    consecutive slices of the epoch's permutation, rank r takes the r-th
    contiguous share, an epoch's tail shorter than a global batch is dropped,
    and across relaunches with any world size and batch size every sample of
    an epoch is consumed at most once (exactly once, but for that tail).

    dataset is the dataset or its length; rank and world default to the process
    group's (or RANK and WORLD_SIZE); seed makes the permutations.
    """

    def __init__(self, dataset: Any, local_batch: int, *, rank: Optional[int] = None,
                 world: Optional[int] = None, seed: int = 0) -> None:
        super().__init__(None)
        size = dataset if isinstance(dataset, int) else len(dataset)
        self.order = SampleOrder(size, seed)
        self.rank = _rank() if rank is None else rank
        self.world = _world() if world is None else world
        if local_batch <= 0:
            raise ValueError(f"local batch must be positive, got {local_batch}")
        self.local_batch = local_batch

    @property
    def global_batch(self) -> int:
        """Samples the whole job consumes per step: world x local_batch."""
        return self.world * self.local_batch

    @property
    def epoch(self) -> int:
        """The current epoch (0-based)."""
        return self.order.epoch

    @property
    def position(self) -> int:
        """Samples of the current epoch consumed by the whole job."""
        return self.order.position

    def __iter__(self) -> Iterator[List[int]]:
        """This rank's local batches for the rest of the current epoch."""
        return self.order.batches(self.rank, self.world, self.local_batch)

    def __len__(self) -> int:
        """The number of batches the next iteration yields."""
        left = self.order.remaining(self.global_batch)
        return left if left else self.order.size // self.global_batch

    def advance(self) -> None:
        """Record one step: the whole job consumed one more global batch."""
        self.order.advance(self.global_batch)

    def state_dict(self) -> dict:
        """The place in the data (epoch, position, size, seed); independent of world and batch."""
        return self.order.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Resume at the place state_dict() recorded, for this attempt's world and batch."""
        self.order.load_state_dict(state)


def _rank() -> int:
    """The process group's rank, else RANK."""
    return dist.get_rank() if dist.is_initialized() else scavenger.rank()


def _world() -> int:
    """The process group's size, else WORLD_SIZE."""
    return dist.get_world_size() if dist.is_initialized() else scavenger.world_size()
