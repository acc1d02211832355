"""Smoke tests of examples/: two ranks each, reporting to a test socket (skipped without torch)."""

import importlib.util
import json
import math
import os
import socket
import subprocess
import sys
import unittest

from sink import Sink

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "examples")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipUnless(importlib.util.find_spec("torch") and os.path.isdir(EXAMPLES),
                     "torch or examples/ missing")
class ExamplesTest(unittest.TestCase):
    """Each example trains with 2 ranks and prints its summary; the instrumented ones report."""

    BATCH = {"SCAV_GLOBAL_BATCH": "32", "SCAV_LOCAL_BATCH": "16"}

    def start_ranks(self, script: str, steps: int, batch: dict, sink: Sink) -> list:
        """Start script as ranks 0 and 1 like scavctl would, with the batch variables batch."""
        port = str(free_port())
        procs = []
        for rank in (0, 1):
            env = {"PATH": os.environ.get("PATH", ""), "RANK": str(rank), "WORLD_SIZE": "2",
                   "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": port, "SCAV_SOCKET": sink.path, "SCAV_JOB_ID": "ex",
                   "SCAV_ATTEMPT": "1", **batch}
            p = subprocess.Popen(
                [sys.executable, os.path.join(EXAMPLES, script), "--steps", str(steps)],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.addCleanup(p.wait)
            self.addCleanup(p.kill)
            procs.append(p)
        return procs

    def run_example(self, script: str, steps: int = 6, batch: dict = BATCH) -> tuple:
        """Run script as ranks 0 and 1 like scavctl would; return (summary, records)."""
        sink = Sink()
        self.addCleanup(sink.close)
        outs = []
        for p in self.start_ranks(script, steps, batch, sink):
            out, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, out + err)
            outs.append(out)
        summary = json.loads(outs[0].strip().splitlines()[-1])
        self.assertEqual(outs[1].strip(), "")  # only rank 0 prints
        self.assertEqual((summary["event"], summary["steps"], summary["world"]),
                         ("summary", steps, 2))
        return summary, sink.wait_for(2 * steps if script != "plain_ddp.py" else 0, timeout=5)

    def test_instrumented(self):
        for script in ("cnn.py", "mlp.py"):
            with self.subTest(script=script):
                summary, recs = self.run_example(script)
                self.assertEqual(summary["local_batch"], 16)  # from SCAV_LOCAL_BATCH
                self.assertEqual(sorted((r["rank"], r["step"]) for r in recs),
                                 [(k, s) for k in (0, 1) for s in range(1, 7)])
                self.assertTrue(all(r["local_sqr"] > 0 and r["samples"] == 16 for r in recs))

    def test_no_batch_uses_the_scripts_default(self):
        """Without --batch-size scavctl sets no batch variable: the example's own default."""
        summary, recs = self.run_example("cnn.py", batch={})
        self.assertEqual(summary["local_batch"], 32)  # --batch-size 64 over 2 ranks
        self.assertTrue(math.isfinite(summary["final_loss"]), summary)
        self.assertTrue(all(r["samples"] == 32 for r in recs))

    def test_batch_zero_refused_at_start(self):
        """A batch variable of 0 never trains (at batch 0 the loss is NaN): a clear error at start."""
        sink = Sink()
        self.addCleanup(sink.close)
        for p in self.start_ranks("cnn.py", 6, {"SCAV_GLOBAL_BATCH": "0", "SCAV_LOCAL_BATCH": "0"}, sink):
            out, err = p.communicate(timeout=60)
            self.assertNotEqual(p.returncode, 0, out)
            self.assertIn("SCAV_LOCAL_BATCH=0", err)
            self.assertIn("at least 1", err)
            self.assertNotIn("summary", out)

    def test_plain_sends_nothing(self):
        summary, recs = self.run_example("plain_ddp.py")
        self.assertEqual(summary["local_batch"], 32)  # --batch-size 64 over 2 ranks
        self.assertEqual(recs, [])


if __name__ == "__main__":
    unittest.main()
