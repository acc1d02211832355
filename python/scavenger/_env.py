"""The worker environment contract (DESIGN.md section 3), read in one place.

Every launcher sets the torchrun-compatible variables (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and the SCAV_*
variables. Outside Scavenger the SCAV_* variables are absent and the readers
below fall back to torchrun's variables, then to the caller's defaults.
"""

import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def env_int(name: str, default: Optional[int], environ: Mapping[str, str] = os.environ) -> Optional[int]:
    """Return the integer in environ[name], or default when unset, empty or not an integer."""
    raw = environ.get(name, "").strip()
    try:
        return int(raw) if raw else default
    except ValueError:
        return default


def env_float(name: str, default: float, environ: Mapping[str, str] = os.environ) -> float:
    """Return the float in environ[name], or default when unset, empty or not a number."""
    raw = environ.get(name, "").strip()
    try:
        return float(raw) if raw else default
    except ValueError:
        return default


def valid_job_id(job: str) -> bool:
    """Report whether job can be a job id: 1 to 64 characters from [A-Za-z0-9_-]."""
    return _JOB_ID.fullmatch(job) is not None


@dataclass(frozen=True)
class Config:
    """What the telemetry client needs from the environment.

    socket is SCAV_SOCKET, the node daemon's unix socket ("" outside Scavenger).
    start_step is SCAV_START_STEP (see resume_point): the first step reported is
    start_step + 1. local_batch and global_batch are None when unknown.
    preempt_signal is SCAV_PREEMPT_SIGNAL, the signal a scheduler sends before
    it ends the allocation ("" when the launcher names none). token is
    SCAV_TOKEN, which binds this worker's connection to its attempt: the
    daemon counts no line of a connection whose hello lacks it.
    checkpoint_dir is SCAV_CHECKPOINT_DIR: records no daemon took by the time
    the worker ends are left in its SPOOL_DIR for the next daemon.
    """

    socket: str
    job: str
    attempt: int
    rank: int
    world: int
    start_step: int
    local_batch: Optional[int]
    global_batch: Optional[int]
    preempt_signal: str = ""
    token: str = ""
    checkpoint_dir: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "Config":
        """Read the contract from environ (os.environ by default)."""
        world = max(1, env_int("WORLD_SIZE", 1, environ))
        return cls(
            socket=environ.get("SCAV_SOCKET", ""),
            job=environ.get("SCAV_JOB_ID", ""),
            attempt=max(1, env_int("SCAV_ATTEMPT", 1, environ)),
            rank=env_int("RANK", 0, environ),
            world=world,
            start_step=resume_point(environ)[1],
            local_batch=local_batch(None, environ),
            global_batch=global_batch(None, environ),
            preempt_signal=environ.get("SCAV_PREEMPT_SIGNAL", "").strip(),
            token=environ.get("SCAV_TOKEN", ""),
            checkpoint_dir=environ.get("SCAV_CHECKPOINT_DIR", ""),
        )


def resume_point(environ: Mapping[str, str] = os.environ) -> Tuple[Optional[str], int]:
    """The checkpoint to resume from and the last step it holds.

    Normally SCAV_RESTORE and SCAV_START_STEP. When Slurm has requeued the job
    (SLURM_RESTART_COUNT > 0) the batch script runs again with the environment
    of its first run, so the newest complete checkpoint that SCAV_CHECKPOINT_DIR's
    manifest names is used instead, when there is one.
    """
    restore = environ.get("SCAV_RESTORE") or None
    step = max(0, env_int("SCAV_START_STEP", 0, environ) or 0)
    directory = environ.get("SCAV_CHECKPOINT_DIR", "")
    if (env_int("SLURM_RESTART_COUNT", 0, environ) or 0) > 0 and directory:
        # Read once a process: a checkpoint written later must not pair a new
        # path with the step an earlier call returned.
        key = (directory, environ.get("SLURM_RESTART_COUNT"))
        if key not in _requeue_points:
            _requeue_points[key] = _manifest_entry(directory)
        if _requeue_points[key] is not None:
            return _requeue_points[key]
    return restore, step


# The newest checkpoint found at the first resume_point() of a requeued run.
_requeue_points: dict = {}


def _manifest_entry(directory: str) -> Optional[Tuple[str, int]]:
    """(path, step) of the checkpoint the directory's manifest names, or None
    when it has none usable (checkpoint.latest() says why; resuming must not
    fail here)."""
    from . import checkpoint  # late: checkpoint imports this package
    try:
        entry = checkpoint.read_manifest(directory)
        path = checkpoint.latest(directory)
        step = int(entry.get("step", 0)) if entry is not None else 0
    except (checkpoint.CheckpointError, TypeError, ValueError):
        return None
    if entry is None or path is None:
        return None
    return path, max(0, step)


class BatchError(ValueError):
    """A batch variable of the contract that is not a positive number of samples."""


def _batch_var(name: str, environ: Mapping[str, str]) -> Optional[int]:
    """The batch in environ[name]: None when unset (the script's own default
    applies); a BatchError when it is 0 or less, which no step can train at
    (scavd never sets one: without --batch-size it sets none)."""
    value = env_int(name, None, environ)
    if value is not None and value < 1:
        raise BatchError(
            f"{name}={environ.get(name, '').strip()}: a batch must be at least 1 sample; "
            f"give the job a batch (scavctl run --batch-size N) or leave {name} unset "
            "so that the script uses its own default")
    return value


def local_batch(default: Optional[int], environ: Mapping[str, str] = os.environ) -> Optional[int]:
    """SCAV_LOCAL_BATCH; else SCAV_GLOBAL_BATCH split over WORLD_SIZE; else
    default. A batch variable of 0 or less raises BatchError."""
    value = _batch_var("SCAV_LOCAL_BATCH", environ)
    total = _batch_var("SCAV_GLOBAL_BATCH", environ)
    if value is not None:
        return value
    if total is not None:
        return max(1, total // max(1, env_int("WORLD_SIZE", 1, environ)))
    return default


def global_batch(default: Optional[int], environ: Mapping[str, str] = os.environ) -> Optional[int]:
    """SCAV_GLOBAL_BATCH; else SCAV_LOCAL_BATCH times WORLD_SIZE; else
    default. A batch variable of 0 or less raises BatchError."""
    per_worker = _batch_var("SCAV_LOCAL_BATCH", environ)
    value = _batch_var("SCAV_GLOBAL_BATCH", environ)
    if value is not None:
        return value
    if per_worker is not None:
        return per_worker * max(1, env_int("WORLD_SIZE", 1, environ))
    return default
