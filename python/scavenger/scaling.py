"""Learning-rate scaling when a job's global batch changes (standard library only).

A learning rate is tuned at a base global batch B0. When Scavenger relaunches a
job at batch B, the rate is multiplied by a factor of scale = B / B0:

- "linear":   scale                                  (Goyal et al.)
- "sqrt":     sqrt(scale)                             (Krizhevsky; AdaptDL's SqrtScale)
- "adascale": gain(scale) = (var + sqr) / (var / scale + sqr)   (AdaScale, AdaptDL)
- "none":     1

where sqr estimates |G|^2, the squared norm of the true gradient, and var
estimates tr(Sigma) / B0, the variance of a gradient over a batch of B0
(research/paper.md section 10). gain() lies between 1 (no noise: a bigger batch
does not help) and scale (pure noise: it helps linearly), both ways of scale = 1.

SCAV_LR_SCALE, when the launcher sets it, is the factor chosen by Scavenger's
optimizer and overrides the rule (lr_factor()).

    factor = scaling.lr_factor("sqrt", batch=256, base_batch=64)   # 2.0
    scaling.apply_lr_factor(optimizer, factor)                      # lr *= 2, once
"""

import math
import os
from typing import Any, Mapping, Optional, Tuple

from . import _env

__all__ = ["RULES", "gain", "work", "grad_stats", "scale_factor", "lr_factor", "apply_lr_factor",
           "GradientStats"]

RULES = ("linear", "sqrt", "adascale", "none", "env")

# AdaptDL's floors for the read-out of the estimates (sqr >= 0, var >= 1e-6).
_MIN_VAR = 1e-6


def gain(scale: float, sqr: float, var: float) -> float:
    """AdaScale's gain at scale = B / B0: (var + sqr) / (var / scale + sqr).

    sqr is |G|^2 and var the gradient variance at batch B0. sqr is floored at 0
    and var at 1e-6, as AdaptDL reads them, so the gain is always defined.
    """
    _check_scale(scale)
    sqr, var = max(sqr, 0.0), max(var, _MIN_VAR)
    return (var + sqr) / (var / scale + sqr)


def work(batch: int, base: int, sqr: Optional[float], var: Optional[float],
         stats_base: Optional[int] = None) -> float:
    """The work one step of global batch batch does, in samples at batch base.

    That is base * gain(batch / base): a step's scale-invariant progress
    (research/paper.md section 10) in samples of the base batch, how
    Scavenger counts a job's progress against SCAV_TARGET_SAMPLES (with
    SCAV_BASE_BATCH as base). sqr and var are the gradient statistics, var
    the variance at batch stats_base (default: base). Without statistics
    (None) every sample counts, as Scavenger counts them: batch.
    """
    if batch <= 0 or base <= 0:
        raise ValueError(f"batch and base must be positive, got {batch} and {base}")
    if sqr is None or var is None:
        return float(batch)
    v = var * (stats_base or base) / base  # the variance of a base-batch gradient
    return base * gain(batch / base, sqr, v)


def grad_stats(local_sqr: float, avg_sqr: float, count: int, scale: float) -> Tuple[float, float]:
    """Unbiased (sqr, var) from one step's squared gradient norms.

    local_sqr is the mean over the count workers (or micro-batches) of the
    squared norm of each one's own gradient, avg_sqr the squared norm of their
    average, and scale = B / B0 for the global batch B they were measured at.
    Returns sqr = (K*avg - local) / (K - 1) and var = (local - avg) * scale / (K - 1)
    with K = count, unclamped (single steps are noisy; smooth with GradientStats).
    A single worker's local_sqr is an unbiased stand-in for the mean.
    """
    if count < 2:
        raise ValueError(f"grad_stats needs count >= 2 gradients, got {count}")
    _check_scale(scale)
    sqr = (count * avg_sqr - local_sqr) / (count - 1)
    var = (local_sqr - avg_sqr) * scale / (count - 1)
    return sqr, var


def scale_factor(rule: str, scale: float, sqr: Optional[float] = None,
                 var: Optional[float] = None) -> float:
    """The learning-rate factor of rule ("linear", "sqrt", "adascale", "none") at scale = B / B0.

    "adascale" needs the gradient statistics sqr and var (see gain()); without
    them it returns 1, AdaptDL's value before any statistics exist.
    """
    _check_scale(scale)
    if rule == "linear":
        return scale
    if rule == "sqrt":
        return math.sqrt(scale)
    if rule == "adascale":
        return 1.0 if sqr is None or var is None else gain(scale, sqr, var)
    if rule == "none":
        return 1.0
    raise ValueError(f"unknown LR scaling rule {rule!r}; want one of {', '.join(RULES)}")


def lr_factor(rule: str, batch: int, base_batch: int, *, sqr: Optional[float] = None,
              var: Optional[float] = None, environ: Mapping[str, str] = os.environ) -> float:
    """The factor for a global batch of batch when the LR was tuned at base_batch.

    Rule "env" takes the factor Scavenger chose, SCAV_LR_SCALE in environ (1
    when unset or not a positive number); every other rule is computed here:
    scale_factor(rule, batch / base_batch, sqr, var). A script that names its
    rule keeps it whatever the daemon advises.
    """
    if rule == "env":
        chosen = _env.env_float("SCAV_LR_SCALE", 0.0, environ)
        return chosen if chosen > 0 and math.isfinite(chosen) else 1.0
    if base_batch <= 0:
        raise ValueError(f"base batch must be positive, got {base_batch}")
    return scale_factor(rule, batch / base_batch, sqr, var)


def apply_lr_factor(optimizer: Any, factor: float, scheduler: Any = None) -> None:
    """Set every param group's learning rate to factor times its unscaled rate; idempotent.

    The factor in force is kept in each group as "scav_lr_factor" (1 when
    absent), so applying factor f multiplies lr by f / previous: calling twice
    with the same factor changes nothing, and the unscaled rate - the base LR
    as an LR scheduler has moved it - is kept. The key travels in
    optimizer.state_dict(), so after a restore the new attempt's factor
    replaces the old one instead of compounding. Chainable schedulers (StepLR,
    ExponentialLR, ...) then keep scaling the scaled rate; for schedulers that
    recompute the rate from their base_lrs (LambdaLR, OneCycleLR, ...) pass the
    scheduler, whose base_lrs (and the groups' "initial_lr") are rescaled too.
    """
    if not factor > 0 or math.isinf(factor):
        raise ValueError(f"LR factor must be a positive number, got {factor}")
    groups = optimizer.param_groups
    ratios = [factor / group.get("scav_lr_factor", 1.0) for group in groups]
    for group, ratio in zip(groups, ratios):
        group["lr"] *= ratio
        if "initial_lr" in group:
            group["initial_lr"] *= ratio
        group["scav_lr_factor"] = factor
    if scheduler is not None:
        scheduler.base_lrs = [lr * ratio for lr, ratio in zip(scheduler.base_lrs, ratios)]


class GradientStats:
    """Smoothed gradient statistics (sqr, var) for the "adascale" rule, as AdaptDL keeps them.

    Feed update() each step's norms (see grad_stats()); read sqr, var, or
    gain(scale). Exponential averages with decay 0.999 ** scale per step (per B0
    worth of samples) and Adam-style bias correction; before the first update
    sqr and var are None and the gain is 1. state_dict() is plain numbers for a
    checkpoint's extra state.
    """

    def __init__(self, decay: float = 0.999) -> None:
        self.decay = decay
        self._sqr = self._var = self._weight = 0.0
        self._biased = False

    def update(self, local_sqr: float, avg_sqr: float, count: int, scale: float,
               biased: bool = False) -> None:
        """Add one step's norms measured over count gradients at scale = B / B0.

        With count < 2 (one worker, no accumulation) the step carries no
        estimate and is skipped. biased marks the difference estimator's
        norms (two consecutive steps of one worker): replicas' norms after
        them start the averages afresh, as AdaptDL and Scavenger do.
        """
        if count < 2 or not all(map(math.isfinite, (local_sqr, avg_sqr))):
            return
        sqr, var = grad_stats(local_sqr, avg_sqr, count, scale)
        if self._biased and not biased:
            self._sqr = self._var = self._weight = 0.0
        self._biased = bool(biased)
        theta = self.decay ** scale
        self._sqr = theta * self._sqr + (1 - theta) * sqr
        self._var = theta * self._var + (1 - theta) * var
        self._weight = theta * self._weight + (1 - theta)

    def observe(self, record: Mapping[str, Any], world: int, local_batch: int, base: int) -> None:
        """Add one step record of scavenger.torch's tracker, as Scavenger reads it.

        Its norms were taken over record["count"] gradients when it names a
        count (a world of one sends 2: the difference estimator over two
        consecutive steps), else over world, one a worker; each gradient over
        local_batch samples, so scale = count * local_batch / base. A record
        without both norms, with a negative one (float32 rounding), or a
        batch that is not positive is skipped, as Scavenger skips it.
        """
        local, avg = record.get("local_sqr"), record.get("avg_sqr")
        if local is None or avg is None or local < 0 or avg < 0 or local_batch <= 0 or base <= 0:
            return
        count = int(record.get("count") or world)
        self.update(local, avg, count, count * local_batch / base,
                    biased=bool(record.get("biased")))

    @property
    def sqr(self) -> Optional[float]:
        """The smoothed |G|^2, floored at 0 (None before any update)."""
        return max(self._sqr / self._weight, 0.0) if self._weight else None

    @property
    def var(self) -> Optional[float]:
        """The smoothed variance at batch B0, floored at 1e-6 (None before any update)."""
        return max(self._var / self._weight, _MIN_VAR) if self._weight else None

    def gain(self, scale: float) -> float:
        """AdaScale's gain at scale from the smoothed statistics (1 before any update)."""
        return scale_factor("adascale", scale, self.sqr, self.var)

    def work(self, batch: int, base: int, stats_base: int) -> float:
        """work() of one step of batch at base, from these statistics gathered at scale = B / stats_base."""
        return work(batch, base, self.sqr, self.var, stats_base)

    def state_dict(self) -> dict:
        """The running averages, as plain numbers."""
        return {"decay": self.decay, "sqr": self._sqr, "var": self._var, "weight": self._weight,
                "biased": self._biased}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what state_dict() returned (one without "biased" too)."""
        self.decay = float(state["decay"])
        self._sqr, self._var, self._weight = (float(state[k]) for k in ("sqr", "var", "weight"))
        self._biased = bool(state.get("biased", False))


def _check_scale(scale: float) -> None:
    """Reject a scale that is not a positive finite number."""
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"batch scale must be a positive finite number, got {scale}")
