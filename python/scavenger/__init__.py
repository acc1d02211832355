"""Scavenger's python client: step telemetry from training workers.

Standard library only; importable without torch. Inside a Scavenger job (the
launcher sets SCAV_SOCKET) every step() sends one JSON line to the node daemon
from a background thread; outside, every call is a cheap no-op with no thread
and no socket. Training never blocks on telemetry: when the daemon is absent or
slow, records are dropped and counted (see stats()).

    import scavenger
    batch = scavenger.local_batch_size(default=32)
    for x, y in data:
        ...
        optimizer.step()
        scavenger.step(samples=len(x), loss=loss.item())

For PyTorch DDP models, scavenger.torch.instrument() does the reporting itself.

Outside a job, scavenger.run(), jobs(), job(), stop() and wait() submit and
follow jobs through the node daemon's API (scavenger.api, loaded on first use).
"""

import atexit
import os
import sys
import threading
from typing import Any, Dict, Optional

from . import _env
from ._client import Client, NoopClient

__all__ = [
    "init", "step", "close", "stats", "enabled",
    "world_size", "rank", "local_rank", "global_batch_size", "local_batch_size",
    "lr_scale", "checkpoint_dir", "restore_path", "start_step",
    "should_checkpoint", "checkpoint_request", "acknowledge", "target_samples", "base_batch",
    "run", "jobs", "job", "stop", "wait", "DaemonError",
]

_API = ("run", "jobs", "job", "stop", "wait", "DaemonError")


def __getattr__(name: str):
    """The job API (scavenger.api), imported only when a program uses it, so
    that training workers do not pay for http.client."""
    if name in _API:
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'scavenger' has no attribute {name!r}")

_instance = None
_lock = threading.Lock()


def _start(timed: bool):
    """Create the process's client from the environment, once."""
    global _instance
    with _lock:
        if _instance is None:
            _instance = _make_client(_env.Config.from_env(), timed)
            if isinstance(_instance, Client):
                sys.exit = _recording_exit(sys.exit)
            atexit.register(_close_at_exit)
    return _instance


_exit_status: Any = None  # what sys.exit was last given


def _recording_exit(original):
    """sys.exit, remembering its status for the worker's end record."""
    def exit(status: Any = None):
        global _exit_status
        _exit_status = status
        original(status)
    exit.__doc__ = original.__doc__
    return exit


def _exit_code() -> int:
    """The status the interpreter is exiting with, as well as atexit can
    tell: 1 after an unhandled exception, sys.exit's status, else 0. (A
    SystemExit raised by hand is not seen: its status counts as 0.)"""
    if getattr(sys, "last_exc", None) is not None or getattr(sys, "last_value", None) is not None:
        return 1
    if _exit_status is None:
        return 0
    return _exit_status if isinstance(_exit_status, int) else 1


def _close_at_exit() -> None:
    """close() at the interpreter's exit, telling the client how it ends."""
    if _instance is not None:
        _instance.close(1.0, exit_code=_exit_code())


def _make_client(config: _env.Config, timed: bool):
    """A Client when the environment names a socket and a valid job, else a NoopClient."""
    if not config.socket:
        return NoopClient()
    if not _env.valid_job_id(config.job):
        print(f"scavenger: SCAV_JOB_ID {config.job!r} is not a job id; telemetry disabled",
              file=sys.stderr)
        return NoopClient()
    return Client(config, timed=timed)


def _forget_in_child() -> None:
    """A forked child must not report its parent's steps: silence it."""
    global _instance
    if _instance is not None:
        _instance = NoopClient()


os.register_at_fork(after_in_child=_forget_in_child)


def init() -> None:
    """Start telemetry (idempotent). Step timing starts here; step() calls it implicitly."""
    _start(timed=True)


def step(samples: Optional[int] = None, loss: Any = None, **fields: Any) -> None:
    """Report one optimizer step; returns at once, never blocks.

    samples: samples this worker processed in the step; loss: the training loss
    (any number, NaN and Inf are left out). fields: any of dt (the step's wall
    seconds; by default the time since the previous step() or init()), micro,
    compute_s, sync_s, local_sqr, avg_sqr, epoch, local_batch, global_batch,
    plus JSON scalars of your own. Invalid values are left out of the record.
    """
    (_instance or _start(timed=False)).step(samples, loss, **fields)


def close(timeout: float = 1.0) -> None:
    """Flush queued records, waiting at most timeout seconds. Registered atexit."""
    if _instance is not None:
        _instance.close(timeout)


def stats() -> Dict[str, int]:
    """Counters of this process: sent, dropped and queued records."""
    return (_instance or NoopClient()).stats()


def enabled() -> bool:
    """True inside a Scavenger job (SCAV_SOCKET is set)."""
    return bool(os.environ.get("SCAV_SOCKET"))


def world_size() -> int:
    """Number of workers (WORLD_SIZE, default 1)."""
    return max(1, _env.env_int("WORLD_SIZE", 1))


def rank() -> int:
    """This worker's global rank (RANK, default 0)."""
    return _env.env_int("RANK", 0)


def local_rank() -> int:
    """This worker's rank on its node (LOCAL_RANK, default 0)."""
    return _env.env_int("LOCAL_RANK", 0)


def global_batch_size(default: Optional[int] = None) -> Optional[int]:
    """The global batch: SCAV_GLOBAL_BATCH, else SCAV_LOCAL_BATCH x world size, else default."""
    return _env.global_batch(default)


def local_batch_size(default: Optional[int] = None) -> Optional[int]:
    """This worker's batch: SCAV_LOCAL_BATCH, else SCAV_GLOBAL_BATCH / world size, else default."""
    return _env.local_batch(default)


def lr_scale() -> float:
    """The factor to multiply the base learning rate by (SCAV_LR_SCALE, default 1.0)."""
    return _env.env_float("SCAV_LR_SCALE", 1.0)


def checkpoint_dir() -> Optional[str]:
    """Where to write checkpoints (SCAV_CHECKPOINT_DIR), or None."""
    return os.environ.get("SCAV_CHECKPOINT_DIR") or None


def restore_path() -> Optional[str]:
    """The checkpoint to resume from (SCAV_RESTORE), or None for a fresh start.

    After a Slurm requeue (SLURM_RESTART_COUNT > 0) it is the newest complete
    checkpoint in checkpoint_dir() instead, when there is one.
    """
    return _env.resume_point()[0]


def start_step() -> int:
    """The last step done before this attempt (SCAV_START_STEP, 0 for a fresh
    start; after a Slurm requeue, the step of restore_path())."""
    return _env.resume_point()[1]


def target_samples() -> Optional[int]:
    """The job's work in samples (SCAV_TARGET_SAMPLES), when the user gave a target.

    The samples are counted at the statistical efficiency of base_batch():
    a step of a larger global batch does less work than its samples, by the
    gradient noise scale (scavenger.scaling.work()), as Scavenger counts
    the job's progress when it plans.
    """
    return _env.env_int("SCAV_TARGET_SAMPLES", None)


def base_batch() -> Optional[int]:
    """The global batch the job's work is counted at (SCAV_BASE_BATCH), when the user gave a target."""
    return _env.env_int("SCAV_BASE_BATCH", None)


def should_checkpoint() -> bool:
    """True when Scavenger asked this job to checkpoint and the step it named is done.

    Check it after each optimizer step (after step() or the tracker reported
    it). Every rank sees it at the same step. When True: write the checkpoint
    (scavenger.checkpoint.checkpoint() on every rank; rank 0 writes), call
    acknowledge(path) on every rank, and exit 0; Scavenger relaunches the job
    at its new configuration with SCAV_RESTORE pointing at the checkpoint.
    """
    return (_instance or _start(timed=False)).should_checkpoint()


def checkpoint_request() -> Optional[Dict[str, Any]]:
    """The pending checkpoint request (id, after_step, dir), or None."""
    return (_instance or _start(timed=False)).checkpoint_request()


def acknowledge(checkpoint: Optional[str] = None) -> None:
    """Tell Scavenger that this worker has checkpointed; rank 0 passes the file's path."""
    (_instance or _start(timed=False)).acknowledge(checkpoint)
