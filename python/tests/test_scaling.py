"""Tests of scavenger.scaling: the LR rules, the gradient statistics, applying a factor."""

import importlib.util
import math
import unittest

from scavenger import scaling

HAS_TORCH = importlib.util.find_spec("torch") is not None
if HAS_TORCH:
    import torch


class FakeOptimizer:
    """Just what apply_lr_factor() touches: param_groups."""

    def __init__(self, *lrs: float) -> None:
        self.param_groups = [{"lr": lr} for lr in lrs]


class RulesTest(unittest.TestCase):
    """scale_factor(), gain(), lr_factor()."""

    def test_table(self):
        # (rule, scale, sqr, var, factor)
        table = [
            ("linear", 4.0, None, None, 4.0),
            ("linear", 0.25, None, None, 0.25),
            ("sqrt", 4.0, None, None, 2.0),
            ("sqrt", 0.25, None, None, 0.5),
            ("none", 8.0, None, None, 1.0),
            ("adascale", 4.0, 1.0, 1.0, 2.0 / 1.25),
            ("adascale", 4.0, 0.0, 3.0, 4.0),      # pure noise: linear
            ("adascale", 4.0, 2.0, 0.0, 1.0),      # no noise (var floored at 1e-6): ~1
            ("adascale", 0.5, 1.0, 1.0, 2.0 / 3.0),  # smaller batch: between scale and 1
            ("adascale", 1.0, 5.0, 7.0, 1.0),
            ("adascale", 4.0, None, None, 1.0),    # no statistics yet
        ]
        for rule, scale, sqr, var, want in table:
            with self.subTest(rule=rule, scale=scale, sqr=sqr, var=var):
                self.assertAlmostEqual(scaling.scale_factor(rule, scale, sqr, var), want, places=5)

    def test_gain_between_one_and_scale(self):
        for scale in (0.25, 0.5, 2.0, 16.0):
            for sqr, var in ((1.0, 0.1), (0.1, 1.0), (3.0, 3.0)):
                g = scaling.gain(scale, sqr, var)
                self.assertLessEqual(min(1.0, scale), g)
                self.assertLessEqual(g, max(1.0, scale))

    def test_work_in_base_batch_samples(self):
        # (batch, base, sqr, var, stats_base, work)
        table = [
            (128, 32, None, None, None, 128.0),     # no statistics: every sample counts
            (32, 32, 1.0, 1.0, None, 32.0),         # the base batch: its samples
            (128, 32, 1.0, 1.0, None, 32 * 1.6),    # gain(4) with var = sqr
            (128, 32, 1.0, 0.5, 64, 32 * 1.6),      # the same variance, gathered at 64
            (128, 32, 0.0, 3.0, None, 128.0),       # pure noise: every sample counts
            (16, 32, 1.0, 1.0, None, 32 * 2 / 3),   # a smaller batch does more a sample
        ]
        for batch, base, sqr, var, stats_base, want in table:
            with self.subTest(batch=batch, base=base, sqr=sqr, var=var, stats_base=stats_base):
                self.assertAlmostEqual(scaling.work(batch, base, sqr, var, stats_base), want, places=5)
        with self.assertRaises(ValueError):
            scaling.work(0, 32, None, None)

    def test_negative_sqr_is_floored(self):
        self.assertAlmostEqual(scaling.gain(4.0, -1.0, 2.0), 4.0)

    def test_lr_factor(self):
        self.assertAlmostEqual(scaling.lr_factor("linear", 256, 64, environ={}), 4.0)
        self.assertAlmostEqual(scaling.lr_factor("sqrt", 256, 64, environ={}), 2.0)
        self.assertAlmostEqual(
            scaling.lr_factor("adascale", 256, 64, sqr=1.0, var=1.0, environ={}), 1.6)

    def test_env_rule_takes_the_daemons_factor(self):
        self.assertEqual(scaling.lr_factor("env", 256, 64, environ={"SCAV_LR_SCALE": "1.5"}), 1.5)
        for raw in ("", "abc", "0", "-2", "inf"):
            with self.subTest(raw=raw):
                self.assertEqual(scaling.lr_factor("env", 256, 64, environ={"SCAV_LR_SCALE": raw}), 1.0)

    def test_named_rule_ignores_the_env(self):
        got = scaling.lr_factor("linear", 128, 64, environ={"SCAV_LR_SCALE": "1.5"})
        self.assertEqual(got, 2.0)

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, "unknown LR scaling rule 'cubic'"):
            scaling.scale_factor("cubic", 2.0)
        with self.assertRaisesRegex(ValueError, "base batch"):
            scaling.lr_factor("linear", 64, 0, environ={})
        for scale in (0.0, -1.0, math.inf, math.nan):
            with self.assertRaises(ValueError):
                scaling.scale_factor("linear", scale)


class StatsTest(unittest.TestCase):
    """grad_stats() and GradientStats."""

    @staticmethod
    def expected_norms(sqr: float, var: float, count: int, scale: float) -> tuple:
        """E[local_sqr], E[avg_sqr] for |G|^2 = sqr and B0-variance var (paper section 10)."""
        return sqr + var * count / scale, sqr + var / scale

    def test_grad_stats_recovers_the_truth(self):
        for sqr, var, count, scale in ((2.0, 3.0, 2, 1.0), (0.5, 8.0, 4, 4.0), (1.0, 0.1, 8, 0.5)):
            with self.subTest(count=count, scale=scale):
                local, avg = self.expected_norms(sqr, var, count, scale)
                got = scaling.grad_stats(local, avg, count, scale)
                self.assertAlmostEqual(got[0], sqr)
                self.assertAlmostEqual(got[1], var)

    def test_grad_stats_needs_two(self):
        with self.assertRaisesRegex(ValueError, "count >= 2"):
            scaling.grad_stats(1.0, 1.0, 1, 1.0)

    def test_smoothed(self):
        stats = scaling.GradientStats()
        self.assertEqual((stats.sqr, stats.var, stats.gain(4.0)), (None, None, 1.0))
        stats.update(5.0, 5.0, 1, 1.0)  # one worker: no estimate
        stats.update(math.nan, 1.0, 2, 1.0)
        self.assertEqual(stats.gain(4.0), 1.0)
        local, avg = self.expected_norms(2.0, 6.0, 2, 2.0)
        for _ in range(5):
            stats.update(local, avg, 2, 2.0)
        self.assertAlmostEqual(stats.sqr, 2.0)  # bias correction: exact from the first update
        self.assertAlmostEqual(stats.var, 6.0)
        self.assertAlmostEqual(stats.gain(4.0), scaling.gain(4.0, 2.0, 6.0))
        copy = scaling.GradientStats()
        copy.load_state_dict(stats.state_dict())
        self.assertEqual((copy.sqr, copy.var), (stats.sqr, stats.var))

    def test_observe_reads_records_as_scavenger_does(self):
        # One worker's tracker sends the difference estimator's norms with count 2:
        # two gradients of local batch 32 each, at base 16, so scale 4.
        stats = scaling.GradientStats()
        local, avg = self.expected_norms(1.0, 8.0, 2, 4.0)
        stats.observe({"loss": 0.5}, world=1, local_batch=32, base=16)  # no norms: nothing
        self.assertIsNone(stats.sqr)
        stats.observe({"local_sqr": local, "avg_sqr": avg, "count": 2, "biased": True},
                      world=1, local_batch=32, base=16)
        self.assertAlmostEqual(stats.sqr, 1.0)
        self.assertAlmostEqual(stats.var, 8.0)
        # Two replicas' norms (no count: one gradient a worker) start afresh after the
        # difference estimator's, and a checkpoint keeps which kind came last.
        copy = scaling.GradientStats()
        copy.load_state_dict(stats.state_dict())
        local, avg = self.expected_norms(3.0, 2.0, 2, 2.0)
        copy.observe({"local_sqr": local, "avg_sqr": avg}, world=2, local_batch=16, base=16)
        self.assertAlmostEqual(copy.sqr, 3.0)
        self.assertAlmostEqual(copy.var, 2.0)
        # A second record weighs in by decay ** scale (0.999 ** 2 here): the smoothing
        # depends on the base, as Scavenger's does.
        first = copy.sqr
        local, avg = self.expected_norms(5.0, 2.0, 2, 2.0)
        copy.observe({"local_sqr": local, "avg_sqr": avg}, world=2, local_batch=16, base=16)
        theta = 0.999 ** 2
        self.assertAlmostEqual(copy.sqr, (theta * (1 - 0.999 ** 2) * first + (1 - theta) * 5.0)
                               / (theta * (1 - 0.999 ** 2) + (1 - theta)))
        # What Scavenger skips is skipped: a negative norm, a batch that is not positive.
        state = copy.state_dict()
        for record, local_batch, base in (({"local_sqr": -1e-9, "avg_sqr": 1.0}, 16, 16),
                                          ({"local_sqr": 1.0, "avg_sqr": 0.5}, 0, 16),
                                          ({"local_sqr": 1.0, "avg_sqr": 0.5}, 16, 0)):
            copy.observe(record, world=2, local_batch=local_batch, base=base)
        self.assertEqual(copy.state_dict(), state)


class ApplyTest(unittest.TestCase):
    """apply_lr_factor() on param groups."""

    def test_relative_and_idempotent(self):
        opt = FakeOptimizer(0.1, 0.01)
        for factor, want in ((2.0, (0.2, 0.02)), (2.0, (0.2, 0.02)), (0.5, (0.05, 0.005)),
                             (1.0, (0.1, 0.01))):
            scaling.apply_lr_factor(opt, factor)
            self.assertEqual([round(g["lr"], 12) for g in opt.param_groups], list(want))

    def test_keeps_a_decayed_rate(self):
        opt = FakeOptimizer(0.1)
        scaling.apply_lr_factor(opt, 4.0)
        opt.param_groups[0]["lr"] *= 0.1  # a scheduler's decay
        scaling.apply_lr_factor(opt, 2.0)
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.1 * 0.1 * 2.0)

    def test_rejects_bad_factor(self):
        for factor in (0.0, -1.0, math.inf, math.nan):
            with self.assertRaises(ValueError):
                scaling.apply_lr_factor(FakeOptimizer(0.1), factor)

    @unittest.skipUnless(HAS_TORCH, "torch missing")
    def test_survives_a_checkpoint(self):
        params = [torch.nn.Parameter(torch.zeros(2))]
        opt = torch.optim.SGD(params, lr=0.1)
        scaling.apply_lr_factor(opt, 2.0)
        fresh = torch.optim.SGD(params, lr=0.1)
        fresh.load_state_dict(opt.state_dict())
        scaling.apply_lr_factor(fresh, 4.0)  # replaces the saved factor, does not compound
        self.assertAlmostEqual(fresh.param_groups[0]["lr"], 0.4)

    @unittest.skipUnless(HAS_TORCH, "torch missing")
    def test_schedulers(self):
        params = [torch.nn.Parameter(torch.zeros(2))]
        opt = torch.optim.SGD(params, lr=0.1)
        step = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        scaling.apply_lr_factor(opt, 2.0)
        opt.step()
        step.step()
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.1 * 2.0 * 0.5)
        opt = torch.optim.SGD(params, lr=0.1)
        lam = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 1.0 / (epoch + 1))
        scaling.apply_lr_factor(opt, 2.0, lam)
        opt.step()
        lam.step()
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.1 * 2.0 / 2)


if __name__ == "__main__":
    unittest.main()
