"""Tests of scavenger.torch on real gloo DDP groups (skipped without torch)."""

import importlib.util
import math
import os
import socket
import subprocess
import sys
import tempfile
import unittest
import warnings
from unittest import mock

from scavenger import _env
from scavenger._client import Client

from sink import Sink

HAS_TORCH = importlib.util.find_spec("torch") is not None
if HAS_TORCH:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel

    import scavenger.torch

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = {"v", "job", "attempt", "rank", "world", "step", "t", "dt", "micro", "samples"}
STEP_FIELDS = BASE | {"sync_s", "compute_s", "local_sqr", "avg_sqr", "loss"}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def small_model() -> "nn.Module":
    """A two-layer MLP with fixed weights."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))


def assert_difference_estimator(test: unittest.TestCase, recs: list) -> None:
    """World of one: the first step reports its own norm twice; later steps the
    difference estimator over two steps (count 2, biased), where the average of
    two gradients is never larger than their mean squared norm."""
    first, later = recs[0], recs[1:]
    test.assertAlmostEqual(first["local_sqr"], first["avg_sqr"], delta=1e-6 * first["local_sqr"])
    test.assertNotIn("count", first)
    for r in later:
        test.assertEqual((r["count"], r["biased"]), (2, True))
        test.assertLessEqual(r["avg_sqr"], r["local_sqr"] * (1 + 1e-6))


class WithUnused(nn.Module if HAS_TORCH else object):
    """small_model() plus a layer that forward() never uses."""

    def __init__(self):
        super().__init__()
        self.net = small_model()
        self.unused = nn.Linear(3, 3)

    def forward(self, x):
        return self.net(x)


def train(model, opt, tracker, steps: int, accum: int = 1, batch: int = 8) -> None:
    """SGD steps on random data; with accum > 1, the first micro-batches under no_sync()."""
    for _ in range(steps):
        opt.zero_grad()
        for i in range(accum):
            loss = model(torch.randn(batch, 10)).pow(2).mean()
            if i < accum - 1 and isinstance(model, DistributedDataParallel):
                with model.no_sync():
                    loss.backward()
            else:
                loss.backward()
        tracker.loss(loss)
        opt.step()


@unittest.skipUnless(HAS_TORCH, "torch is not installed")
class SingleProcessTest(unittest.TestCase):
    """A world of one, in this process, on a FileStore."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        store = dist.FileStore(os.path.join(cls.tmp.name, "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)

    @classmethod
    def tearDownClass(cls):
        dist.destroy_process_group()
        cls.tmp.cleanup()

    def setUp(self):
        self.sink = Sink()
        self.addCleanup(self.sink.close)
        self.client = Client(_env.Config(socket=self.sink.path, job="t1", attempt=1, rank=0,
                                         world=1, start_step=0, local_batch=8, global_batch=8))
        self.addCleanup(self.client.close)

    def records(self, n: int) -> list:
        """Close the client and return the n records it sent."""
        self.client.close()
        recs = self.sink.wait_for(n)
        self.assertEqual([r["step"] for r in recs], list(range(1, n + 1)))
        return recs

    def test_ddp_step_records(self):
        model = DistributedDataParallel(small_model())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        tracker = scavenger.torch.instrument(model, opt, client=self.client)
        train(model, opt, tracker, steps=4)
        recs = self.records(4)
        for r in recs:
            self.assertTrue(STEP_FIELDS <= set(r), r)
            self.assertEqual((r["micro"], r["samples"]), (1, 8))
            self.assertGreater(r["local_sqr"], 0)
            self.assertAlmostEqual(r["compute_s"] + r["sync_s"], r["dt"], places=9)
            self.assertTrue(math.isfinite(r["loss"]))
        assert_difference_estimator(self, recs)

    def test_static_graph_and_unused_parameters(self):
        for kwargs in ({"static_graph": True}, {"find_unused_parameters": True}):
            with self.subTest(**kwargs):
                model = DistributedDataParallel(WithUnused(), **kwargs)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                tracker = scavenger.torch.instrument(model, opt, client=self.client)
                train(model, opt, tracker, steps=3)
        for r in self.records(6):
            self.assertGreater(r["local_sqr"], 0)
            self.assertIn("sync_s", r)

    def test_norms_match_gradients(self):
        model = DistributedDataParallel(small_model())
        opt = torch.optim.SGD(model.parameters(), lr=0.0)  # keep the gradients readable
        tracker = scavenger.torch.instrument(model, opt, client=self.client)
        train(model, opt, tracker, steps=1)
        want = sum(float(p.grad.pow(2).sum()) for p in model.parameters())
        (r,) = self.records(1)
        self.assertAlmostEqual(r["local_sqr"], want, delta=1e-5 * want)

    def test_accumulation_sends_micro(self):
        model = DistributedDataParallel(small_model())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        tracker = scavenger.torch.instrument(model, opt, client=self.client)
        train(model, opt, tracker, steps=3, accum=3)
        with torch.no_grad():
            model(torch.randn(5, 10))  # evaluation forwards are not micro-batches
        train(model, opt, tracker, steps=1)
        recs = self.records(4)
        self.assertEqual([(r["micro"], r["samples"]) for r in recs],
                         [(3, 24), (3, 24), (3, 24), (1, 8)])
        self.assertTrue(all(r["local_sqr"] > 0 for r in recs))

    def test_annotate_and_scheduler(self):
        for scheduler_first in (False, True):
            model = DistributedDataParallel(small_model())
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            if scheduler_first:
                sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
            tracker = scavenger.torch.instrument(model, opt, client=self.client)
            if not scheduler_first:
                sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # "optimizer.step() has been overridden"
                for epoch in range(2):
                    tracker.annotate(epoch=epoch)
                    train(model, opt, tracker, steps=1)
                    sched.step()
            self.assertEqual(opt._step_count, 2)
        self.assertEqual([r["epoch"] for r in self.records(4)], [0, 1, 0, 1])

    def test_plain_module_world_one(self):
        model = small_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        tracker = scavenger.torch.instrument(model, opt, client=self.client)
        train(model, opt, tracker, steps=2)
        recs = self.records(2)
        for r in recs:
            self.assertNotIn("sync_s", r)
            self.assertGreater(r["local_sqr"], 0)
        assert_difference_estimator(self, recs)

    def test_difference_estimator_values(self):
        model = small_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.0)  # the same weights: p and c comparable
        tracker = scavenger.torch.instrument(model, opt, client=self.client)
        grads = []
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(8, 10)).pow(2).mean().backward()
            grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone())
            opt.step()
        p, c = grads
        r = self.records(2)[1]
        self.assertAlmostEqual(r["local_sqr"], float((p.dot(p) + c.dot(c)) / 2), places=5)
        self.assertAlmostEqual(r["avg_sqr"], float(((p + c) / 2).pow(2).sum()), places=5)

    def test_noop_outside_scavenger(self):
        model = DistributedDataParallel(small_model())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with mock.patch.dict(os.environ, {}, clear=True):
            tracker = scavenger.torch.instrument(model, opt)
        self.assertIsInstance(tracker, scavenger.torch.NoopTracker)
        self.assertNotIn("step", vars(opt))
        self.assertEqual(len(model._forward_pre_hooks), 0)
        train(model, opt, tracker, steps=1)


@unittest.skipUnless(HAS_TORCH, "torch is not installed")
class TwoProcessTest(unittest.TestCase):
    """Two ranks in separate processes, reporting to one socket as under scavctl."""

    def run_ranks(self, steps: int, accum: int) -> list:
        """Run tests/ddp_worker.py as ranks 0 and 1; return the records received."""
        sink = Sink()
        self.addCleanup(sink.close)
        port = str(free_port())
        procs = []
        for rank in (0, 1):
            env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.path.dirname(HERE),
                   "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                   "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                   "SCAV_SOCKET": sink.path, "SCAV_JOB_ID": "ddp2", "SCAV_ATTEMPT": "1",
                   "SCAV_LOCAL_BATCH": "16", "SCAV_GLOBAL_BATCH": "32", "OMP_NUM_THREADS": "1"}
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(HERE, "ddp_worker.py"), str(steps), str(accum)],
                env=env))
        for p in procs:
            self.addCleanup(p.wait)
            self.addCleanup(p.kill)
            self.assertEqual(p.wait(timeout=60), 0)
        return sink.wait_for(2 * steps)

    def test_gradient_noise_inputs(self):
        steps = 20
        recs = self.run_ranks(steps, accum=1)
        by_rank = {r: sorted(x["step"] for x in recs if x["rank"] == r) for r in (0, 1)}
        self.assertEqual(by_rank, {0: list(range(1, steps + 1)), 1: list(range(1, steps + 1))})
        for r in recs:
            self.assertTrue(STEP_FIELDS <= set(r), r)
            self.assertEqual((r["world"], r["micro"], r["samples"]), (2, 1, 16))
            for key in ("local_sqr", "avg_sqr"):
                self.assertTrue(math.isfinite(r[key]) and r[key] > 0, r)
        mean_local = sum(r["local_sqr"] for r in recs) / len(recs)
        mean_avg = sum(r["avg_sqr"] for r in recs) / len(recs)
        self.assertGreater(mean_local, mean_avg)
        by_step = {}
        for r in recs:
            by_step.setdefault(r["step"], []).append(r)
        for pair in by_step.values():  # both ranks see the same averaged gradient
            self.assertAlmostEqual(pair[0]["avg_sqr"], pair[1]["avg_sqr"],
                                   delta=1e-5 * pair[0]["avg_sqr"])
            self.assertGreaterEqual((pair[0]["local_sqr"] + pair[1]["local_sqr"]) / 2,
                                    pair[0]["avg_sqr"] * (1 - 1e-6))

    def test_accumulation(self):
        recs = self.run_ranks(steps=3, accum=2)
        self.assertEqual(len(recs), 6)
        self.assertEqual({(r["micro"], r["samples"]) for r in recs}, {(2, 32)})


if __name__ == "__main__":
    unittest.main()
