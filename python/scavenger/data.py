"""The data order of a job that survives relaunches at any world size and batch size.

Standard library only: the index arithmetic lives here and is tested without
torch; scavenger.distributed.ResumableDistributedSampler is its torch shell.

The model. Epoch e visits the dataset in one permutation, seeded by seed + e and
so identical on every rank and in every attempt. The job's position is the
number of samples of that permutation the whole job has consumed so far.
Each step consumes the next global batch: the B = world x local_batch indices
perm[position : position + B]. Rank r takes the contiguous share
perm[position + r*local_batch : position + (r+1)*local_batch]. After the step the
trainer advances the position by B. A checkpoint stores (epoch, position);
a relaunch with another world size or batch size carries on from there, so the
samples an epoch consumes are always the prefix perm[:position] of its
permutation, each exactly once, whatever the sequence of configurations.

End of an epoch: global batches are always full. When fewer than B samples
remain, those are dropped for this epoch and the next epoch begins (drop_last).
Every rank therefore sees the same number of equal batches (DDP never waits on a
rank that ran dry), and since each epoch has its own permutation no sample is
dropped systematically. The dropped tail is under one global batch, and which
samples are in it depends on the batch size in force at the epoch's end.
"""

import random
from typing import Iterator, List, Mapping

__all__ = ["permutation", "shard", "SampleOrder"]


def permutation(size: int, seed: int, epoch: int) -> List[int]:
    """The visiting order of epoch: range(size) shuffled by random.Random(seed + epoch)."""
    order = list(range(size))
    random.Random(seed + epoch).shuffle(order)
    return order


def shard(global_batch: List[int], rank: int, world: int) -> List[int]:
    """Rank's contiguous share of a global batch whose length is a multiple of world."""
    if len(global_batch) % world:
        raise ValueError(f"global batch of {len(global_batch)} does not split over {world} ranks")
    local = len(global_batch) // world
    return global_batch[rank * local:(rank + 1) * local]


class SampleOrder:
    """The job's place in its data: epoch and position, with the batches that come next.

    size is the dataset's length, seed the base of the epochs' permutations.
    The state is independent of world size and batch size; batches() and
    advance() take those as arguments.
    """

    def __init__(self, size: int, seed: int = 0) -> None:
        if size <= 0:
            raise ValueError(f"dataset size must be positive, got {size}")
        self.size = size
        self.seed = seed
        self.epoch = 0
        self.position = 0

    def roll(self, global_batch: int) -> None:
        """Start the next epoch when less than one global batch remains in this one."""
        _check_batch(global_batch, self.size)
        if self.size - self.position < global_batch:
            self.epoch += 1
            self.position = 0

    def remaining(self, global_batch: int) -> int:
        """Full global batches left in the current epoch from the position."""
        return (self.size - self.position) // global_batch

    def batches(self, rank: int, world: int, local_batch: int) -> Iterator[List[int]]:
        """Rank's local batches for the rest of the current epoch (after roll()).

        The epoch and position are read when iteration starts; advance() during
        the iteration does not change what it yields.
        """
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not in a world of {world}")
        global_batch = world * local_batch
        self.roll(global_batch)
        order = permutation(self.size, self.seed, self.epoch)
        start = self.position
        for k in range(self.remaining(global_batch)):
            begin = start + k * global_batch
            yield shard(order[begin:begin + global_batch], rank, world)

    def advance(self, global_batch: int) -> None:
        """Record that the whole job consumed the next global batch (as batches() yields it)."""
        self.roll(global_batch)
        self.position += global_batch
        self.roll(global_batch)

    def state_dict(self) -> dict:
        """The order's state: size, seed, epoch and position (plain ints)."""
        return {"size": self.size, "seed": self.seed, "epoch": self.epoch,
                "position": self.position}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Resume from state_dict()'s output; the dataset size and seed must match."""
        if state["size"] != self.size or state["seed"] != self.seed:
            raise ValueError(f"sampler state is for {state['size']} samples with seed "
                             f"{state['seed']}, not {self.size} with seed {self.seed}")
        if not 0 <= state["position"] <= self.size or state["epoch"] < 0:
            raise ValueError(f"sampler state has an invalid place: epoch {state['epoch']}, "
                             f"position {state['position']} of {self.size}")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


def _check_batch(global_batch: int, size: int) -> None:
    """Reject a global batch that is not positive or exceeds the dataset."""
    if not 0 < global_batch <= size:
        raise ValueError(f"global batch {global_batch} does not fit a dataset of {size}")
