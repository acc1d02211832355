"""The wire encoder: encode_step writes what encode(build_record(...)) writes."""

import json
import math
import random
import unittest

from scavenger._wire import MAX_RECORD_BYTES, build_record, encode, encode_step, step_prefix


class EncodeStepTest(unittest.TestCase):
    """encode_step, the sender thread's fast path, against the reference."""

    VALUES = [None, True, False, 0, 1, -3, 2 ** 70, 0.0, -0.0, 1.5, -2.25, 1e-300, 1e300, float("nan"),
              float("inf"), float("-inf"), "x", "é\"\n", "", [1], {"a": 1}, object()]
    KEYS = ["dt", "compute_s", "sync_s", "local_sqr", "avg_sqr", "samples", "local_batch", "global_batch",
            "epoch", "micro", "note", "ü-key", "step", "t", "job", "v"]

    def test_same_records(self):
        rng = random.Random(7)
        header = {"v": 1, "job": "j-1", "attempt": 2, "rank": 1, "world": 2}
        prefix = step_prefix(header)
        for _ in range(3000):
            fields = {k: rng.choice(self.VALUES) for k in rng.sample(self.KEYS, rng.randrange(len(self.KEYS)))}
            samples, loss = rng.choice(self.VALUES), rng.choice(self.VALUES)
            step, t = rng.randrange(1, 2 ** 40), rng.random() * 2e9
            want = encode(build_record(header, step, t, samples, loss, fields))
            got = encode_step(prefix, step, t, samples, loss, fields)
            if want is None:
                self.assertIsNone(got)
                continue
            self.assertTrue(got.endswith(b"\n"))
            self.assertEqual(json.loads(got), json.loads(want), (fields, samples, loss))

    def test_nonfinite_loss(self):
        prefix = step_prefix({"v": 1, "job": "j", "attempt": 1, "rank": 0, "world": 1})
        for loss, wire in ((float("nan"), "NaN"), (float("inf"), "Infinity"), (-math.inf, "-Infinity")):
            self.assertEqual(json.loads(encode_step(prefix, 1, 1.0, None, loss, {}))["loss"], wire)

    def test_too_long(self):
        prefix = step_prefix({"v": 1, "job": "j", "attempt": 1, "rank": 0, "world": 1})
        self.assertIsNone(encode_step(prefix, 1, 1.0, None, None, {"blob": "x" * MAX_RECORD_BYTES}))


if __name__ == "__main__":
    unittest.main()
