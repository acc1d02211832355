"""The CNN of cnn.py, resumable: Scavenger can move it between worker counts and batch sizes.

Each attempt joins the process group for its own world size, restores from
SCAV_RESTORE (model, optimizer, data position, RNG, gradient statistics),
scales the learning rate for its global batch, trains a map-style synthetic
dataset with the resumable sampler until global step --steps (or, under
scavctl run --target-*, until the job's work is done: its samples counted at
the statistical efficiency of SCAV_BASE_BATCH, as Scavenger counts them), and
checkpoints to
SCAV_CHECKPOINT_DIR at the end or when Scavenger asks — then it acknowledges
and exits, and Scavenger relaunches it at the new configuration. The lines
that adopt Scavenger are marked `# scavenger`.

Rank 0 prints {"event": "resumed", "from_step": N, ...} when it resumes and one
JSON summary line at the end; nothing per step. --log-indices DIR writes the
sample indices each rank consumed, one JSON line per step, to
DIR/attempt<SCAV_ATTEMPT>-rank<RANK>.jsonl.

    scavctl run --workers 1:2 --batch-size 32:256 --policy scavenger --target-steps 300 -- \\
        /usr/bin/python3 examples/resumable_cnn.py --lr-rule sqrt
"""

import argparse
import json
import os

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import common
import scavenger
import scavenger.torch
from scavenger import scaling
from scavenger.checkpoint import checkpoint, restore
from scavenger.distributed import ResumableDistributedSampler, any_rank, finish, setup


class SyntheticImages(Dataset):
    """size random 3x32x32 images labelled by a fixed random teacher; item i is (x, y, i).

    Sample i is drawn from its own seed, so every rank and every attempt sees
    the same dataset without holding it in memory.
    """

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed = size, seed
        teacher = torch.Generator().manual_seed(seed)
        self.weights = torch.randn(common.CLASSES, 3 * 32 * 32, generator=teacher)

    def __len__(self) -> int:
        """The number of samples."""
        return self.size

    def __getitem__(self, i: int) -> tuple:
        """Sample i: (image, label, i)."""
        x = torch.randn(*common.INPUT_SHAPES["cnn"],
                        generator=torch.Generator().manual_seed(self.seed * 1_000_003 + i))
        return x, (self.weights @ x.flatten()).argmax(), i


class GradientReporter:
    """Takes the tracker's step records: feeds AdaScale's statistics, forwards to Scavenger."""

    def __init__(self, stats: scaling.GradientStats, world: int, local_batch: int, base: int) -> None:
        self.stats, self.world, self.local_batch, self.base = stats, world, local_batch, base

    def step(self, **fields) -> None:
        """One optimizer step's record (local_sqr, avg_sqr, count, loss, ...)."""
        self.stats.observe(fields, self.world, self.local_batch, self.base)
        if scavenger.enabled():
            scavenger.step(**fields)


class IndexLog:
    """The sample indices this rank consumed, one JSON line per step (or nothing without a dir)."""

    def __init__(self, directory: str, rank: int) -> None:
        self.file = None
        if directory:
            os.makedirs(directory, exist_ok=True)
            attempt = os.environ.get("SCAV_ATTEMPT", "1")
            self.file = open(os.path.join(directory, f"attempt{attempt}-rank{rank}.jsonl"), "w")

    def write(self, step: int, epoch: int, indices: torch.Tensor) -> None:
        """Record a completed step's indices."""
        if self.file:
            self.file.write(json.dumps({"step": step, "epoch": epoch,
                                        "indices": indices.tolist()}) + "\n")

    def close(self) -> None:
        """Close the file."""
        if self.file:
            self.file.close()


def parse_args() -> argparse.Namespace:
    """The flags."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=None,
                   help="train until this global step (default: until SCAV_TARGET_SAMPLES "
                        "samples when Scavenger sets a target, else 100 steps)")
    p.add_argument("--batch-size", type=int, default=64,
                   help="global batch size when Scavenger does not set one")
    p.add_argument("--base-batch", type=int, default=64, help="global batch that --lr is for")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate at --base-batch")
    p.add_argument("--lr-rule", choices=scaling.RULES, default="sqrt",
                   help="LR scaling for other batch sizes (SCAV_LR_SCALE overrides it)")
    p.add_argument("--dataset-size", type=int, default=4096, help="samples per epoch")
    p.add_argument("--seed", type=int, default=0, help="seed of the model, data and order")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="also checkpoint every N steps (0: only at the end or when asked)")
    p.add_argument("--log-indices", metavar="DIR", default="",
                   help="write each rank's consumed sample indices under DIR")
    return p.parse_args()


def stop_now(work: "Work", rank: int, step: int) -> bool:
    """Whether to stop before the next step: rank 0 counts the work done, or Scavenger
    asks for a checkpoint. Agreed by every rank (one tiny all-reduce a step), so that a
    rank that heard the request late still stops at the same step as the others. Only
    rank 0's count decides, as only its checkpoint keeps it: each rank's statistics
    see its own gradient, and so count the work a little differently."""
    return any_rank(rank == 0 and not work.left(step) or scavenger.should_checkpoint())  # scavenger


class Work:
    """The job's work and how much of it is done: --steps, else Scavenger's target in
    samples at its base batch (read once), else 100 steps."""

    def __init__(self, args: argparse.Namespace, stats: scaling.GradientStats, stats_base: int,
                 done: float) -> None:
        self.steps, self.stats, self.stats_base, self.done = args.steps, stats, stats_base, done
        self.target = scavenger.target_samples()  # scavenger
        self.base = scavenger.base_batch()  # scavenger

    def left(self, step: int) -> bool:
        """Whether work is left after step steps."""
        if self.steps is not None:
            return step < self.steps
        return self.done < self.target if self.target else step < 100

    def add(self, batch: int) -> None:
        """Count one step of global batch batch: in samples at the base batch, or its samples."""
        self.done += self.stats.work(batch, self.base, self.stats_base) if self.base else float(batch)  # scavenger


def main() -> None:
    """Run one attempt: resume, scale the LR, train to --steps or a request, checkpoint."""
    args = parse_args()
    model, rank, world = setup(common.make_model("cnn", args.seed))  # scavenger
    local_batch = scavenger.local_batch_size(default=max(1, args.batch_size // world))  # scavenger
    dataset = SyntheticImages(args.dataset_size, args.seed)
    sampler = ResumableDistributedSampler(dataset, local_batch, seed=args.seed)  # scavenger
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # The gradient statistics are kept at the batch Scavenger counts the work at, so that
    # they smooth as its own do; the LR's rule reads their variance at --base-batch.
    stats, stats_base = scaling.GradientStats(), scavenger.base_batch() or args.base_batch  # scavenger
    step, seen, done = resume(model, optimizer, sampler, stats, rank, world)
    work = Work(args, stats, stats_base, done)
    var = None if stats.var is None else stats.var * stats_base / args.base_batch
    factor = scaling.lr_factor(args.lr_rule, sampler.global_batch, args.base_batch,
                               sqr=stats.sqr, var=var)  # scavenger
    scaling.apply_lr_factor(optimizer, factor)  # scavenger
    reporter = GradientReporter(stats, world, local_batch, stats_base)
    tracker = scavenger.torch.instrument(model, optimizer, client=reporter)  # scavenger
    probe = held_out(args.dataset_size, args.seed)
    summary = {"start_step": step, "eval_loss_start": evaluate(model, probe)}
    log = IndexLog(args.log_indices, rank)
    losses = []
    batches = endless(DataLoader(dataset, batch_sampler=sampler))
    while not stop_now(work, rank, step):
        x, y, indices = next(batches)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        tracker.loss(loss)
        optimizer.step()
        log.write(step + 1, sampler.epoch, indices)
        sampler.advance()  # scavenger
        step, seen = step + 1, seen + sampler.global_batch
        work.add(sampler.global_batch)
        losses.append(loss.detach())
        if args.checkpoint_every and step % args.checkpoint_every == 0 and scavenger.checkpoint_dir():
            checkpoint(scavenger.checkpoint_dir(), model=model, optimizer=optimizer, step=step,
                       samples_seen=seen, sampler=sampler, extra={"grad_stats": stats.state_dict(), "work": work.done})
    log.close()
    summary["eval_loss_end"] = evaluate(model, probe)
    saved = None
    if scavenger.checkpoint_dir():  # scavenger
        saved = checkpoint(scavenger.checkpoint_dir(), model=model, optimizer=optimizer,
                           step=step, samples_seen=seen, sampler=sampler,
                           extra={"grad_stats": stats.state_dict(), "work": work.done})  # scavenger
        scavenger.acknowledge(saved)  # scavenger: a no-op unless Scavenger asked
    summary["first_loss"], summary["last_loss"] = mean_over_ranks(losses, world)
    say(rank, {"event": "summary", **summary, "step": step, "world": world,
               "local_batch": local_batch, "global_batch": sampler.global_batch,
               "lr": optimizer.param_groups[0]["lr"], "lr_factor": factor,
               "epoch": sampler.epoch, "position": sampler.position, "samples_seen": seen,
               "work": work.done, "grad_sqr": stats.sqr, "grad_var": stats.var,
               "grad_var_batch": stats_base, "checkpoint": saved})
    finish()  # scavenger: leave the group and exit without torch's teardown


def resume(model, optimizer, sampler, stats, rank: int, world: int) -> tuple:
    """Restore from SCAV_RESTORE when set; return (step, samples seen, work done), zeros on a fresh start."""
    if not scavenger.restore_path():  # scavenger
        return 0, 0, 0.0
    state = restore(scavenger.restore_path(), model=model, optimizer=optimizer,
                    sampler=sampler)  # scavenger
    stats.load_state_dict(state.extra["grad_stats"])
    say(rank, {"event": "resumed", "from_step": state.step, "saved_world": state.world_size,
               "world": world, "epoch": sampler.epoch, "position": sampler.position})
    return state.step, state.samples_seen, float(state.extra.get("work", state.samples_seen))


def endless(loader: DataLoader):
    """The loader's batches, epoch after epoch."""
    while True:
        yield from loader


def held_out(size: int, seed: int, count: int = 64) -> list:
    """A fixed probe batch [x, y] of count samples from the same teacher, not in the dataset."""
    extended = SyntheticImages(size + count, seed)
    samples = [extended[i][:2] for i in range(size, size + count)]
    return [torch.stack([x for x, _ in samples]), torch.stack([y for _, y in samples])]


def evaluate(model: torch.nn.Module, probe: list) -> float:
    """The loss on a fixed probe batch (the same on every rank and attempt)."""
    with torch.no_grad():
        return F.cross_entropy(model.module(probe[0]), probe[1]).item()


def mean_over_ranks(losses: list, world: int) -> tuple:
    """The first and last training losses of this attempt, averaged over the ranks."""
    if not losses:
        return None, None
    pair = torch.stack([losses[0], losses[-1]]).to(torch.float64)
    torch.distributed.all_reduce(pair)
    return tuple((pair / world).tolist())


def say(rank: int, record: dict) -> None:
    """Print one JSON line from rank 0."""
    if rank == 0:
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
