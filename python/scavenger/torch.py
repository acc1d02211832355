"""Step telemetry for PyTorch DistributedDataParallel models.

    import scavenger.torch
    tracker = scavenger.torch.instrument(ddp_model, optimizer)
    for x, y in data:
        loss = loss_fn(ddp_model(x), y)
        loss.backward()
        tracker.loss(loss)      # optional
        optimizer.step()        # reports the step

instrument() registers a DDP communication hook (the default all-reduce, timed
and measured), a forward pre-hook on the model (counts micro-batches and
samples) and wraps optimizer.step (torch 1.13 has no step hooks). Each
optimizer step then reports:

- dt: wall seconds since the previous optimizer step (or since instrument());
- sync_s: from the launch of the first bucket's all-reduce to the completion of
  the last one (it overlaps the backward pass);
- compute_s: dt - sync_s, the rest of the step;
- local_sqr: squared L2 norm of this worker's gradient before the all-reduce,
  summed over buckets; avg_sqr: that of the averaged gradient after it. These
  are the inputs of the gradient noise scale. With accumulation under no_sync()
  both are norms of the accumulated gradient, as DDP holds it;
- micro: forward passes with autograd enabled in training mode since the
  previous step, i.e. micro-batches; samples: the sum of their batch sizes
  (size of the first tensor argument's first dimension);
- loss: the last tensor given to tracker.loss(), if any.

The tensors are combined and read with one .tolist() per step. With several
backward passes that each synchronise (no no_sync()), the norms are those of
the last one. A model that is not DDP is supported in a world of one: both norms
are then the squared norm of the parameters' gradients at optimizer.step().
Outside Scavenger, instrument() registers nothing and returns a no-op tracker.
"""

import time
import types
import weakref
from typing import Any, List, Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import scavenger

__all__ = ["instrument", "Tracker", "NoopTracker"]


def instrument(model: torch.nn.Module, optimizer: torch.optim.Optimizer, *,
               process_group: Optional[Any] = None, client: Optional[Any] = None):
    """Report every optimizer.step() of a DDP model; return the tracker.

    process_group is the group DDP all-reduces over (the default group when
    None). client is the scavenger client to report to (the process's own by
    default; tests pass theirs). Outside Scavenger, returns a NoopTracker and
    changes nothing. DDP accepts one communication hook: instrument a model once,
    and not one with a hook of its own.
    """
    if client is None:
        if not scavenger.enabled():
            return NoopTracker()
        scavenger.init()
        client = scavenger
    return Tracker(model, optimizer, client, process_group)


class NoopTracker:
    """The tracker outside Scavenger: every method does nothing."""

    def loss(self, value: Any) -> None:
        """Do nothing."""

    def annotate(self, **fields: Any) -> None:
        """Do nothing."""


class Tracker:
    """Measures each optimizer step of one model and reports it to a client."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, client: Any,
                 process_group: Optional[Any] = None):
        self._client = client
        self._group = process_group
        self._loss: Any = None
        self._fields: dict = {}
        self._micro = 0
        self._samples = 0
        self._local: List[torch.Tensor] = []
        self._avg: List[torch.Tensor] = []
        self._sync_start: Optional[float] = None
        self._sync_end: Optional[float] = None
        self._callbacks: List[weakref.ref] = []  # our all-reduce callbacks not yet released
        self._last = time.perf_counter()
        self._params: List[torch.Tensor] = []
        if isinstance(model, DistributedDataParallel):
            model.register_comm_hook(None, self._allreduce_hook)
        else:
            self._params = [p for g in optimizer.param_groups for p in g["params"]]
        model.register_forward_pre_hook(self._forward_pre_hook)
        _wrap_step(optimizer, self._after_step)

    def loss(self, value: Any) -> None:
        """Attach the loss of the current step (a tensor is read once, at optimizer.step())."""
        self._loss = value.detach() if isinstance(value, torch.Tensor) else value

    def annotate(self, **fields: Any) -> None:
        """Add fields (e.g. epoch=3, or micro=/samples= to override the counts) to the next record."""
        self._fields.update(fields)

    def _forward_pre_hook(self, module: torch.nn.Module, inputs: tuple) -> None:
        """Count a training micro-batch and its samples."""
        if module.training and torch.is_grad_enabled():
            self._micro += 1
            if inputs and isinstance(inputs[0], torch.Tensor) and inputs[0].dim() > 0:
                self._samples += inputs[0].shape[0]

    def _allreduce_hook(self, _state: Any,
                        bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        """DDP's default all-reduce (divide, then sum), measuring the bucket before and after."""
        buf = bucket.buffer()
        if bucket.index() == 0:  # DDP launches buckets in index order: a new sync begins
            self._local.clear()
            self._avg.clear()
            self._sync_start = time.perf_counter()
        self._local.append(_sqr(buf))
        group = self._group if self._group is not None else dist.group.WORLD
        buf.div_(group.size())
        work = dist.all_reduce(buf, group=group, async_op=True)
        callback = self._allreduce_done  # a fresh bound method, owned by the future
        self._callbacks.append(weakref.ref(callback))
        return work.get_future().then(callback)

    def _allreduce_done(self, fut: torch.futures.Future) -> torch.Tensor:
        """Completion of one bucket: note the time and the averaged norm."""
        self._sync_end = time.perf_counter()
        averaged = fut.value()[0]
        self._avg.append(_sqr(averaged))
        return averaged

    def _release_callbacks(self, timeout: float = 1.0) -> None:
        """Wait until the process group's threads have dropped our callbacks.

        A gloo thread releases a callback (taking the GIL) just after the
        all-reduce it follows completes, which can be after DDP has moved on.
        If the process group were destroyed by then, torch 1.13 would join that
        thread while holding the GIL and deadlock; waiting here (usually not at
        all) keeps every step boundary free of such pending work.
        """
        deadline = time.perf_counter() + timeout
        while any(ref() is not None for ref in self._callbacks):
            if time.perf_counter() > deadline:
                break
            time.sleep(0.0001)  # lets the gloo thread take the GIL
        self._callbacks.clear()

    def _after_step(self) -> None:
        """Report the step that optimizer.step() just finished, then reset."""
        self._release_callbacks()
        now = time.perf_counter()
        dt = now - self._last
        self._last = now
        fields = {"dt": dt, "micro": max(1, self._micro)}
        if self._samples:
            fields["samples"] = self._samples
        if self._sync_start is not None and self._sync_end is not None:
            sync = max(0.0, self._sync_end - self._sync_start)
            fields["sync_s"] = sync
            fields["compute_s"] = max(0.0, dt - sync)
        fields.update(self._read_tensors())
        fields.update(self._fields)
        self._client.step(**fields)
        self._reset()

    def _read_tensors(self) -> dict:
        """local_sqr, avg_sqr and loss as floats, with a single .tolist()."""
        local, avg = self._norms()
        names, values = [], []
        if local is not None:
            names += ["local_sqr", "avg_sqr"]
            values += [local, avg]
        if isinstance(self._loss, torch.Tensor) and self._loss.numel() == 1:
            names.append("loss")
            values.append(self._loss.reshape(()).to(torch.float64))
        out = dict(zip(names, torch.stack(values).tolist())) if values else {}
        if self._loss is not None and not isinstance(self._loss, torch.Tensor):
            out["loss"] = self._loss
        return out

    def _norms(self):
        """The summed local and averaged squared norms of this step (None when unknown)."""
        if self._local and len(self._avg) == len(self._local):
            return (torch.stack(self._local).sum().to(torch.float64),
                    torch.stack(self._avg).sum().to(torch.float64))
        grads = [p.grad for p in self._params if p.grad is not None]
        if not grads or scavenger.world_size() != 1:
            return None, None
        total = torch.stack([_sqr(g.reshape(-1)) for g in grads]).sum().to(torch.float64)
        return total, total

    def _reset(self) -> None:
        """Forget the step just reported."""
        self._loss = None
        self._fields = {}
        self._micro = 0
        self._samples = 0
        self._local.clear()
        self._avg.clear()
        self._sync_start = self._sync_end = None


def _sqr(t: torch.Tensor) -> torch.Tensor:
    """Squared L2 norm of a flat tensor, accumulated in at least float32."""
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    return torch.dot(t, t)


def _wrap_step(optimizer: torch.optim.Optimizer, after: Any) -> None:
    """Make optimizer.step() call after() once it returns.

    The wrapper is a bound method so that LR schedulers created later can wrap it
    again (they read __func__ and __self__), and it keeps their step counter
    marker when a scheduler wrapped step first.
    """
    original = optimizer.step

    def step(_self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        after()
        return out

    if getattr(original, "_with_counter", False):
        step._with_counter = True
    optimizer.step = types.MethodType(step, optimizer)
