"""Step telemetry for PyTorch DistributedDataParallel models.

    import scavenger.torch
    tracker = scavenger.torch.instrument(ddp_model, optimizer)
    for x, y in data:
        loss = loss_fn(ddp_model(x), y)
        loss.backward()
        tracker.loss(loss)      # optional
        optimizer.step()        # reports the step

instrument() registers a DDP communication hook (DDP's default all-reduce, timed
and measured), a forward pre-hook on the model (counts micro-batches and
samples) and wraps optimizer.step (torch 1.13 has no step hooks). Each
optimizer step then reports:

- dt: wall seconds since the previous optimizer step (or since instrument());
- sync_s: from the launch of the first bucket's all-reduce to the end of the
  last one, as seen at the end of the backward pass (the all-reduces overlap
  the backward pass; on CUDA the end is when the host stops waiting, not when
  the device finishes);
- compute_s: dt - sync_s, the rest of the step;
- local_sqr: squared L2 norm of this worker's gradient before the all-reduce,
  summed over buckets; avg_sqr: that of the averaged gradient after it, read
  from the all-reduced buckets at the end of the backward pass. These are the
  inputs of the gradient noise scale. With accumulation under no_sync() both
  are norms of the accumulated gradient, as DDP holds it;
- micro: forward passes with autograd enabled in training mode since the
  previous step, i.e. micro-batches; samples: the sum of their batch sizes
  (size of the first tensor argument's first dimension);
- loss: the last tensor given to tracker.loss(), if any.

In a world of one there is no second gradient to compare with, so the norms
come from AdaptDL's difference estimator over two consecutive steps: with p
and c the previous and the current gradient, local_sqr = (|p|² + |c|²)/2 and
avg_sqr = |(p + c)/2|², sent with count = 2 and biased = true (the two were
taken at different weights). It keeps one copy of the gradient.

Costs per step: one dot product per bucket before and after the all-reduce,
and reading the numbers (on a GPU with one .tolist(), a single synchronisation). No python runs on the
process group's threads. With several backward passes that each synchronise
(no no_sync()), the norms are those of the last one. A model built with
static_graph=True is all-reduced bucket by bucket, without overlap (its first
backward pass calls the hook too late for the overlapped path). A model that is
not DDP is supported in a world of one: both norms are then the squared norm of
the parameters' gradients at optimizer.step(). Outside Scavenger, instrument()
registers nothing and returns a no-op tracker.
"""

import time
import types
from typing import Any, List, Optional

import torch
import torch.distributed as dist
from torch.autograd import Variable
from torch.nn.parallel import DistributedDataParallel

import scavenger

__all__ = ["instrument", "Tracker", "NoopTracker"]


def instrument(model: torch.nn.Module, optimizer: torch.optim.Optimizer, *,
               client: Optional[Any] = None):
    """Report every optimizer.step() of a DDP model; return the tracker.

    client is where steps go: any object with a step(**fields) method taking
    the fields of scavenger.step(); the scavenger module itself by default. Outside Scavenger, returns a NoopTracker and changes
    nothing. DDP accepts one communication hook: instrument a model once, and
    not one with a hook of its own.
    """
    if client is None:
        if not scavenger.enabled():
            return NoopTracker()
        scavenger.init()
        client = scavenger
    return Tracker(model, optimizer, client)


class NoopTracker:
    """The tracker outside Scavenger: every method does nothing."""

    def loss(self, value: Any) -> None:
        """Do nothing."""

    def annotate(self, **fields: Any) -> None:
        """Do nothing."""


class Tracker:
    """Measures each optimizer step of one model and reports it to a client."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, client: Any):
        self._client = client
        self._loss: Any = None
        self._fields: dict = {}
        self._micro = 0
        self._samples = 0
        self._local: List[torch.Tensor] = []  # squared norm of each bucket before all-reduce
        self._avg: List[torch.Tensor] = []  # squared norm of each bucket after it
        self._sync_start: Optional[float] = None
        self._sync_end: Optional[float] = None
        self._pending: List[tuple] = []  # (work, bucket, future for DDP) of the running sync
        self._bufs: List[torch.Tensor] = []  # this step's averaged buckets
        self._prev: Optional[List[torch.Tensor]] = None  # the previous step's gradient (world 1)
        self._prev_ok = False
        self._last = time.perf_counter()
        self._params: List[torch.Tensor] = []
        self._world = scavenger.world_size()
        if isinstance(model, DistributedDataParallel):
            self._ddp = model
            self._world = model.process_group.size()
            model.register_comm_hook(model.process_group, self._allreduce_hook)
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

    def _allreduce_hook(self, group: dist.ProcessGroup,
                        bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        """DDP's default all-reduce (divide, then sum), measuring the bucket before it.

        The all-reduce is launched at once; the future handed to DDP is completed
        by _finish_sync at the end of the backward pass, on this thread, so that no
        python runs on the process group's threads (a callback there costs a GIL
        hand-off per bucket, and can deadlock torch 1.13 at process-group teardown).
        """
        buf = bucket.buffer()
        if bucket.index() == 0:  # DDP launches buckets in index order: a new sync begins
            self._local.clear()
            self._avg.clear()
            self._bufs = []
            self._sync_start = time.perf_counter()
        self._local.append(_sqr(buf))
        buf.div_(self._world)
        work = group.allreduce([buf])
        result = torch.futures.Future()
        if self._ddp.static_graph:  # its first backward calls hooks after the final callbacks
            work.wait()
            self._sync_end = time.perf_counter()
            self._avg.append(_sqr(buf))
            self._bufs.append(buf)
            result.set_result(buf)
            return result
        self._pending.append((work, buf, result))
        if bucket.is_last():  # queued before DDP's finaliser, which waits on our futures
            Variable._execution_engine.queue_callback(self._finish_sync)
        return result

    def _finish_sync(self) -> None:
        """End of the backward pass: wait for the all-reduces, measure the averaged
        buckets (still in cache) and hand them to DDP."""
        for work, _, _ in self._pending:
            work.wait()
        self._sync_end = time.perf_counter()
        for _, buf, result in self._pending:
            self._avg.append(_sqr(buf))
            self._bufs.append(buf)
            result.set_result(buf)
        self._pending.clear()

    def _after_step(self) -> None:
        """Report the step that optimizer.step() just finished, then reset."""
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
        """local_sqr, avg_sqr (and count, biased) and loss as floats."""
        local, avg = self._squares()
        diff = self._world == 1 and local
        if diff:
            local, avg = self._difference(local)
        loss = self._loss
        tensors = local + avg
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            tensors.append(loss.reshape(()))
        values = _floats(tensors)
        out = {}
        if local:
            out["local_sqr"] = sum(values[:len(local)])
            out["avg_sqr"] = sum(values[len(local):len(local) + len(avg)])
            if diff and self._prev_ok:
                out["count"], out["biased"] = 2, True
        if len(values) > len(local) + len(avg):
            out["loss"] = values[-1]
        elif loss is not None and not isinstance(loss, torch.Tensor):
            out["loss"] = loss
        return out

    def _difference(self, squares: List[torch.Tensor]) -> tuple:
        """World of one: the difference estimator's ([local], [avg]) from this
        step's gradient and the previous one's; this step's own squares when
        there is no previous gradient of the same shape."""
        cur = self._bufs if self._bufs else [p.grad.reshape(-1) for p in self._params if p.grad is not None]
        prev, self._prev = self._prev, [t.detach().clone() for t in cur]
        self._prev_ok = prev is not None and len(prev) == len(cur) and all(
            a.shape == b.shape for a, b in zip(prev, cur))
        if not self._prev_ok:
            return squares, list(squares)
        pp = torch.stack([_sqr(t) for t in prev]).sum()
        cc = torch.stack(squares).sum()
        pc = torch.stack([torch.dot(a.float(), b.float()) for a, b in zip(prev, cur)]).sum()
        return [(pp + cc) / 2], [(pp + 2 * pc + cc) / 4]

    def _squares(self) -> tuple:
        """This step's squared norms per bucket, local and averaged ([] and [] when unknown)."""
        if self._local and len(self._avg) == len(self._local):
            return list(self._local), list(self._avg)
        grads = [p.grad for p in self._params if p.grad is not None]
        if not grads or scavenger.world_size() != 1:
            return [], []
        squares = [_sqr(g.reshape(-1)) for g in grads]
        return squares, list(squares)

    def _reset(self) -> None:
        """Forget the step just reported."""
        self._loss = None
        self._fields = {}
        self._micro = 0
        self._samples = 0
        self._local.clear()
        self._avg.clear()
        self._bufs = []
        self._sync_start = self._sync_end = None


def _sqr(t: torch.Tensor) -> torch.Tensor:
    """Squared L2 norm of a flat tensor, accumulated in at least float32."""
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    return torch.dot(t, t)


def _floats(tensors: List[torch.Tensor]) -> List[float]:
    """The values of 0-d tensors: .item() each on the CPU (cheapest there), else one
    .tolist() of their stack, so that a device is synchronised once per step."""
    if not tensors or all(t.device.type == "cpu" for t in tensors):
        return [t.item() for t in tensors]
    if len({(t.dtype, t.device) for t in tensors}) > 1:
        tensors = [t.to(tensors[0].device, torch.float64) for t in tensors]
    return torch.stack(tensors).tolist()


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
