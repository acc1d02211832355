"""Tests of the resumable data order: pure index arithmetic, the torch shell, real relaunches."""

import glob
import importlib.util
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import unittest
from collections import defaultdict

from scavenger import data

HAS_TORCH = importlib.util.find_spec("torch") is not None
if HAS_TORCH:
    import torch

    from scavenger.distributed import ResumableDistributedSampler

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "examples", "resumable_cnn.py")


def simulate(size: int, seed: int, schedule: list) -> dict:
    """Run a schedule of attempts [(world, local_batch, steps)] as every rank would.

    Each attempt starts every rank's SampleOrder from the state rank 0 saved at
    the end of the previous one. Returns {epoch: [indices consumed, in order]}.
    """
    consumed = defaultdict(list)
    saved = data.SampleOrder(size, seed).state_dict()
    for world, local_batch, steps in schedule:
        orders = [data.SampleOrder(size, seed) for _ in range(world)]
        for order in orders:
            order.load_state_dict(saved)
        for _ in range(steps):
            batches = [next(iter(order.batches(r, world, local_batch)))
                       for r, order in enumerate(orders)]
            epoch = orders[0].epoch
            for batch in batches:
                consumed[epoch].extend(batch)
            for order in orders:
                order.advance(world * local_batch)
        states = [order.state_dict() for order in orders]
        assert all(s == states[0] for s in states), states
        saved = states[0]
    return consumed


class ConsumedCheck:
    """Assertions on what a run consumed."""

    def assert_exactly_once(self, size: int, seed: int, consumed: dict) -> None:
        """Each epoch consumed a prefix of its permutation, every index in it exactly once."""
        for epoch, indices in consumed.items():
            perm = data.permutation(size, seed, epoch)
            self.assertEqual(len(indices), len(set(indices)), f"epoch {epoch}: an index twice")
            self.assertEqual(set(indices), set(perm[:len(indices)]), f"epoch {epoch}: not a prefix")


class OrderTest(unittest.TestCase, ConsumedCheck):
    """SampleOrder, permutation() and shard() without torch."""

    def test_permutation_is_deterministic_per_epoch(self):
        a = data.permutation(100, 7, 3)
        self.assertEqual(a, data.permutation(100, 7, 3))
        self.assertEqual(sorted(a), list(range(100)))
        self.assertNotEqual(a, data.permutation(100, 7, 4))

    def test_shard_is_contiguous(self):
        self.assertEqual(data.shard(list(range(8)), 1, 4), [2, 3])
        with self.assertRaisesRegex(ValueError, "does not split"):
            data.shard(list(range(7)), 0, 2)

    def test_ranks_split_each_global_batch(self):
        size, seed = 64, 1
        order = data.SampleOrder(size, seed)
        perm = data.permutation(size, seed, 0)
        rank1 = list(order.batches(1, 2, 4))
        self.assertEqual(len(rank1), 8)
        self.assertEqual(rank1[0], perm[4:8])
        self.assertEqual(rank1[1], perm[12:16])

    def test_epoch_end_drops_the_tail(self):
        order = data.SampleOrder(100, 0)
        self.assertEqual(len(list(order.batches(0, 2, 16))), 3)  # 96 of 100
        for _ in range(3):
            order.advance(32)
        self.assertEqual((order.epoch, order.position), (1, 0))

    def test_bigger_batch_after_relaunch_starts_next_epoch(self):
        order = data.SampleOrder(100, 0)
        order.load_state_dict({"size": 100, "seed": 0, "epoch": 2, "position": 80})
        first = next(order.batches(0, 1, 32))
        self.assertEqual((order.epoch, order.position), (3, 0))
        self.assertEqual(first, data.permutation(100, 0, 3)[:32])

    def test_iteration_ignores_advance(self):
        order = data.SampleOrder(40, 0)
        seen = []
        for batch in order.batches(0, 1, 10):
            seen.extend(batch)
            order.advance(10)
        self.assertEqual(seen, data.permutation(40, 0, 0))
        self.assertEqual((order.epoch, order.position), (1, 0))

    def test_state_validation(self):
        order = data.SampleOrder(10, 0)
        for bad, message in (({"size": 11, "seed": 0, "epoch": 0, "position": 0}, "not 10"),
                             ({"size": 10, "seed": 1, "epoch": 0, "position": 0}, "seed"),
                             ({"size": 10, "seed": 0, "epoch": 0, "position": 11}, "invalid")):
            with self.assertRaisesRegex(ValueError, message):
                order.load_state_dict(bad)
        with self.assertRaisesRegex(ValueError, "does not fit"):
            next(order.batches(0, 2, 8))
        with self.assertRaisesRegex(ValueError, "not in a world"):
            next(order.batches(2, 2, 1))

    def test_relaunch_2_1_2_with_batch_changes(self):
        size, seed = 200, 5
        schedule = [(2, 16, 3), (1, 64, 3), (2, 8, 6)]  # global 32 -> 64 -> 16
        consumed = simulate(size, seed, schedule)
        self.assert_exactly_once(size, seed, consumed)
        self.assertEqual({e: len(i) for e, i in consumed.items()}, {0: 160, 1: 192, 2: 32})

    def test_random_schedules(self):
        rng = random.Random(42)
        for trial in range(200):
            size, seed = rng.randint(64, 300), rng.randint(0, 1000)
            schedule = []
            for _ in range(rng.randint(1, 6)):
                world = rng.choice((1, 2, 3, 4))
                local = rng.randint(1, max(1, size // (4 * world)))
                schedule.append((world, local, rng.randint(0, 12)))
            with self.subTest(trial=trial, size=size, schedule=schedule):
                consumed = simulate(size, seed, schedule)
                self.assert_exactly_once(size, seed, consumed)
                total = sum(w * b * s for w, b, s in schedule)
                self.assertEqual(sum(map(len, consumed.values())), total)


@unittest.skipUnless(HAS_TORCH, "torch missing")
class TorchSamplerTest(unittest.TestCase):
    """ResumableDistributedSampler as a DataLoader batch sampler."""

    def test_dataloader(self):
        dataset = list(range(50))
        sampler = ResumableDistributedSampler(dataset, 5, rank=1, world=2, seed=3)
        loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler)
        self.assertEqual(len(sampler), 5)
        perm = data.permutation(50, 3, 0)
        got = []
        for batch in loader:
            got.append(batch.tolist())
            sampler.advance()
        self.assertEqual(got, [perm[k * 10 + 5:k * 10 + 10] for k in range(5)])
        self.assertEqual((sampler.epoch, sampler.position), (1, 0))

    def test_resume_at_another_world(self):
        first = ResumableDistributedSampler(60, 6, rank=0, world=1)
        for _ in range(3):
            first.advance()
        second = ResumableDistributedSampler(60, 4, rank=1, world=3)
        second.load_state_dict(first.state_dict())
        self.assertEqual(len(second), 3)  # (60 - 18) // 12
        self.assertEqual(next(iter(second)), data.permutation(60, 0, 0)[22:26])


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipUnless(HAS_TORCH and os.path.isfile(EXAMPLE), "torch or the example missing")
class RelaunchTest(unittest.TestCase, ConsumedCheck):
    """examples/resumable_cnn.py on real gloo ranks: 2 ranks, then 1, then 2."""

    SIZE, SEED = 200, 5

    def launch(self, attempt: int, world: int, global_batch: int, steps: int,
               restore: str) -> list:
        """Run one attempt with world ranks; return rank 0's JSON lines."""
        port = str(free_port())
        procs = []
        for rank in range(world):
            env = {"PATH": os.environ.get("PATH", ""), "RANK": str(rank),
                   "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                   "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": port, "OMP_NUM_THREADS": "1", "SCAV_JOB_ID": "relaunch",
                   "SCAV_ATTEMPT": str(attempt), "SCAV_GLOBAL_BATCH": str(global_batch),
                   "SCAV_CHECKPOINT_DIR": self.ckpt, "SCAV_RESTORE": restore}
            procs.append(subprocess.Popen(
                [sys.executable, EXAMPLE, "--steps", str(steps), "--seed", str(self.SEED),
                 "--dataset-size", str(self.SIZE), "--log-indices", self.logs],
                env=env, stdout=subprocess.PIPE, text=True))
            self.addCleanup(_reap, procs[-1])
        outs = [p.communicate(timeout=60)[0] for p in procs]
        for p, out in zip(procs, outs):
            self.assertEqual(p.returncode, 0, out)
        self.assertTrue(all(out == "" for out in outs[1:]), outs)  # only rank 0 prints
        return [json.loads(line) for line in outs[0].splitlines()]

    def consumed(self) -> dict:
        """{epoch: indices} from every log file, and the set of (step, rank, attempt) logged."""
        epochs, steps = defaultdict(list), defaultdict(list)
        for path in glob.glob(os.path.join(self.logs, "*.jsonl")):
            with open(path) as f:
                for line in f:
                    rec = json.loads(line)
                    epochs[rec["epoch"]].extend(rec["indices"])
                    steps[rec["step"]].append(os.path.basename(path))
        return epochs, steps

    def test_2_1_2(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.ckpt, self.logs = os.path.join(tmp.name, "ckpt"), os.path.join(tmp.name, "idx")
        plan = [(2, 32, 3), (1, 64, 6), (2, 16, 12)]  # (world, global batch, until step)
        runs = []
        for attempt, (world, batch, steps) in enumerate(plan, 1):
            restore = self.ckpt if runs else ""
            runs.append(self.launch(attempt, world, batch, steps, restore))
        summaries = [lines[-1] for lines in runs]
        self.assertEqual([s["step"] for s in summaries], [3, 6, 12])
        self.assertEqual([s["world"] for s in summaries], [2, 1, 2])
        for before, lines in zip(summaries, runs[1:]):
            resumed, after = lines[0], lines[-1]
            self.assertEqual(resumed["event"], "resumed")
            self.assertEqual(resumed["from_step"], before["step"])
            self.assertAlmostEqual(after["eval_loss_start"], before["eval_loss_end"], places=5)
            self.assertLess(abs(after["first_loss"] - before["last_loss"]), 0.25)
        epochs, steps = self.consumed()
        self.assertEqual(sorted(steps), list(range(1, 13)))
        self.assertEqual(sorted(len(v) for v in steps.values()), [1, 1, 1] + [2] * 9)
        self.assert_exactly_once(self.SIZE, self.SEED, epochs)
        self.assertEqual({e: len(i) for e, i in epochs.items()}, {0: 160, 1: 192, 2: 32})


def _reap(proc: subprocess.Popen) -> None:
    """Kill a child still running and wait for it."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()


if __name__ == "__main__":
    unittest.main()
