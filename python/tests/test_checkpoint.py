"""Tests of scavenger.checkpoint: round trip, atomicity under crashes, validation (needs torch)."""

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from unittest import mock

from scavenger import checkpoint as ckpt
from scavenger import data

HAS_TORCH = importlib.util.find_spec("torch") is not None
if HAS_TORCH:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make(seed: int) -> tuple:
    """A small model with an SGD-momentum optimizer and a StepLR scheduler."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.2), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def train(model, optimizer, scheduler, steps: int) -> list:
    """Steps on data drawn from torch's RNG (dropout draws too); return the losses."""
    losses = []
    for _ in range(steps):
        x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


def draws() -> tuple:
    """The next value of each RNG the checkpoint covers."""
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


@unittest.skipUnless(HAS_TORCH, "torch missing")
class CheckpointTest(unittest.TestCase):
    """checkpoint(), restore(), latest() in one process."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name

    def save(self, step: int, **kwargs) -> str:
        """Checkpoint a fresh model at step into the test directory."""
        model, optimizer, _ = make(step)
        return ckpt.checkpoint(self.dir, model=model, optimizer=optimizer, step=step,
                               samples_seen=10 * step, **kwargs)

    def test_round_trip(self):
        model, optimizer, scheduler = make(0)
        order = data.SampleOrder(100, seed=3)
        order.advance(30)
        train(model, optimizer, scheduler, 3)
        path = ckpt.checkpoint(self.dir, model=model, optimizer=optimizer, scheduler=scheduler,
                               step=3, samples_seen=96, sampler=order, extra={"note": [1, 2]})
        want_draws = draws()
        want_losses = train(model, optimizer, scheduler, 3)

        model2, optimizer2, scheduler2 = make(1)
        order2 = data.SampleOrder(100, seed=3)
        random.seed(99)
        state = ckpt.restore(self.dir, model=model2, optimizer=optimizer2, scheduler=scheduler2,
                             sampler=order2)
        self.assertEqual((state.path, state.step, state.samples_seen, state.extra),
                         (path, 3, 96, {"note": [1, 2]}))
        self.assertEqual(order2.state_dict(), {"size": 100, "seed": 3, "epoch": 0, "position": 30})
        self.assertEqual(draws(), want_draws)
        self.assertEqual(train(model2, optimizer2, scheduler2, 3), want_losses)
        self.assertEqual(optimizer2.param_groups[0]["lr"], optimizer.param_groups[0]["lr"])

    def test_unwraps_and_restores_into_wrapper(self):
        model, optimizer, _ = make(0)
        wrapper = nn.Module()
        wrapper.module = model  # as DDP holds it
        ckpt.checkpoint(self.dir, model=wrapper, step=1, samples_seen=1)
        target = make(1)[0]
        ckpt.restore(self.dir, model=target)
        for a, b in zip(model.parameters(), target.parameters()):
            self.assertTrue(torch.equal(a, b))

    def test_manifest_written_after_the_file(self):
        with mock.patch("scavenger.checkpoint.os.replace", wraps=os.replace) as replace:
            path = self.save(7)
        self.assertEqual([os.path.basename(c.args[1]) for c in replace.call_args_list],
                         [os.path.basename(path), ckpt.MANIFEST])
        manifest = ckpt.read_manifest(self.dir)
        self.assertEqual({k: manifest[k] for k in ("checkpoint", "step", "samples_seen")},
                         {"checkpoint": "ckpt-0000000007.pt", "step": 7, "samples_seen": 70})
        self.assertEqual(manifest["size"], os.path.getsize(path))
        self.assertEqual(ckpt.latest(self.dir), path)

    def test_failed_rename_keeps_the_previous(self):
        first = self.save(1)
        for failing in (1, 2):  # the checkpoint's rename, then the manifest's
            calls = []

            def replace(src, dst, failing=failing, calls=calls):
                calls.append(dst)
                if len(calls) == failing:
                    raise OSError("injected")
                os.replace(src, dst)

            with self.subTest(failing=failing), \
                    mock.patch("scavenger.checkpoint.os.replace", replace):
                with self.assertRaisesRegex(OSError, "injected"):
                    self.save(2)
            self.assertEqual(ckpt.latest(self.dir), first)
            self.assertEqual(ckpt.restore(self.dir, model=make(3)[0]).step, 1)
            self.assertFalse([n for n in os.listdir(self.dir) if n.endswith(".scavtmp")])

    def test_failed_cleanup_does_not_mask_the_write_error(self):
        def remove(path):
            raise PermissionError(f"injected: cannot remove {path}")

        def replace(src, dst):
            raise OSError("injected: rename failed")

        with mock.patch("scavenger.checkpoint.os.replace", replace), \
                mock.patch("scavenger.checkpoint.os.remove", remove):
            with self.assertRaisesRegex(OSError, "rename failed") as caught:
                self.save(2)
        self.assertNotIsInstance(caught.exception, PermissionError)
        self.assertTrue(any("could not remove" in n for n in getattr(caught.exception, "__notes__", [])))

    def test_keeps_the_newest(self):
        for step in range(1, 6):
            self.save(step)
        self.assertEqual(sorted(os.listdir(self.dir)),
                         ["ckpt-0000000004.pt", "ckpt-0000000005.pt", ckpt.MANIFEST])

    def test_file_path(self):
        target = os.path.join(self.dir, "model.pt")
        self.assertEqual(ckpt.checkpoint(target, model=make(0)[0], step=4, samples_seen=8), target)
        self.assertEqual(ckpt.latest(self.dir), target)
        self.assertEqual(ckpt.restore(target, model=make(1)[0]).step, 4)

    def test_rank_not_in_the_saved_world_gets_its_own_streams(self):
        self.save(5)
        with mock.patch.dict(os.environ, {"RANK": "1"}):
            ckpt.restore(self.dir, model=make(0)[0])
            one = draws()
        with mock.patch.dict(os.environ, {"RANK": "2"}):
            ckpt.restore(self.dir, model=make(0)[0])
            self.assertNotEqual(draws(), one)

    def test_latest_without_manifest(self):
        self.assertIsNone(ckpt.latest(self.dir))
        with self.assertRaisesRegex(ckpt.CheckpointError, "no latest.json"):
            ckpt.restore(self.dir, model=make(0)[0])

    def test_errors_name_the_file_and_fault(self):
        path = self.save(1)
        with open(path, "r+b") as f:
            f.seek(200)
            byte = f.read(1)
            f.seek(200)
            f.write(bytes([byte[0] ^ 0xFF]))
        with self.assertRaisesRegex(ckpt.CheckpointError, f"{path}: sha256 .*corrupt"):
            ckpt.restore(self.dir, model=make(0)[0])
        with open(path, "r+b") as f:
            f.truncate(100)
        with self.assertRaisesRegex(ckpt.CheckpointError, f"{path}: 100 bytes.*truncated"):
            ckpt.restore(path, model=make(0)[0])
        other = os.path.join(self.dir, "other.pt")
        with open(other, "wb") as f:
            f.write(b"not a checkpoint")
        with self.assertRaisesRegex(ckpt.CheckpointError, f"{other}: unreadable"):
            ckpt.restore(other, model=make(0)[0])
        torch.save({"weights": 1}, other)
        with self.assertRaisesRegex(ckpt.CheckpointError, f"{other}: not a scavenger"):
            ckpt.restore(other, model=make(0)[0])

    def test_state_mismatch_errors(self):
        path = self.save(1)
        with self.assertRaisesRegex(ckpt.CheckpointError, f"{path}: cannot load the model"):
            ckpt.restore(path, model=nn.Linear(2, 2))
        with self.assertRaisesRegex(ckpt.CheckpointError, f"{path}: holds no scheduler"):
            model, optimizer, scheduler = make(0)
            ckpt.restore(path, model=model, scheduler=scheduler)

    def test_bad_manifest(self):
        self.save(1)
        manifest = os.path.join(self.dir, ckpt.MANIFEST)
        for content, message in (("{", "unreadable"), ("[]", "not a scavenger.manifest"),
                                 (json.dumps({"format": "scavenger.manifest/1",
                                              "checkpoint": "../x.pt"}), "must be a file name"),
                                 (json.dumps({"format": "scavenger.manifest/1",
                                              "checkpoint": "gone.pt"}), "'gone.pt'.*not exist")):
            with self.subTest(content=content):
                with open(manifest, "w") as f:
                    f.write(content)
                with self.assertRaisesRegex(ckpt.CheckpointError, f"manifest {manifest}: .*{message}"):
                    ckpt.latest(self.dir)


WRITER = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, {python!r})
    from scavenger.checkpoint import checkpoint
    model = torch.nn.Linear(4, 4)
    ballast = torch.zeros(4 << 20)  # 16 MB per checkpoint
    step = 0
    while True:
        step += 1
        ballast[0] = step
        checkpoint({dir!r}, model=model, step=step, samples_seen=step, extra=ballast)
""")


@unittest.skipUnless(HAS_TORCH, "torch missing")
class KillTest(unittest.TestCase):
    """SIGKILL of a process writing checkpoints in a loop, at random moments."""

    def test_kill_while_writing(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        rng = random.Random(7)
        for _ in range(3):
            proc = subprocess.Popen([sys.executable, "-c",
                                     WRITER.format(python=PYTHON_DIR, dir=tmp.name)])
            self.addCleanup(_reap, proc)
            start = ckpt.read_manifest(tmp.name)
            self.wait_for_progress(tmp.name, start["step"] + 2 if start else 2)
            self.wait_for_temporary(tmp.name)
            time.sleep(rng.uniform(0, 0.02))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            state = ckpt.restore(tmp.name, model=torch.nn.Linear(4, 4))
            self.assertEqual(state.extra[0].item(), state.step)
            self.assertEqual(state.path, ckpt.latest(tmp.name))

    def wait_for_progress(self, directory: str, step: int) -> None:
        """Poll until the manifest reaches step and a new write is under way."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            manifest = ckpt.read_manifest(directory)
            if manifest and manifest["step"] >= step:
                return
            time.sleep(0.01)
        self.fail(f"no checkpoint at step {step} within 30 s")

    def wait_for_temporary(self, directory: str) -> None:
        """Poll until a checkpoint is being written (its temporary file exists)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(n.startswith(".ckpt-") for n in os.listdir(directory)):
                return
            time.sleep(0.001)
        self.fail("no checkpoint being written within 30 s")


def _reap(proc: subprocess.Popen) -> None:
    """Kill a child still running and wait for it."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()


if __name__ == "__main__":
    unittest.main()
