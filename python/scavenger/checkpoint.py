"""Crash-safe checkpoints of a training job, resumable at another world size.

    from scavenger.checkpoint import checkpoint, restore, latest

    if scavenger.restore_path():                       # SCAV_RESTORE
        state = restore(scavenger.restore_path(), model=model, optimizer=optimizer,
                        sampler=sampler)
        step = state.step
    ...
    checkpoint(scavenger.checkpoint_dir(), model=model, optimizer=optimizer,
               step=step, samples_seen=seen, sampler=sampler)

A checkpoint holds the model (unwrapped from DDP), the optimizer, the LR
scheduler, the global step, the samples seen, the sampler's place in the data,
every rank's RNG states (python random, numpy when importable, torch CPU and
CUDA) and the caller's extra state (anything torch.save pickles).

Writing is atomic: rank 0 writes a temporary file in the target directory,
flushes and fsyncs it, renames it to its final name and fsyncs the directory;
only then does it write the manifest, latest.json, the same way. A crash at any
moment leaves the previous checkpoint and manifest intact, and latest() keeps
naming a complete file. The manifest (one JSON object):

    {"format": "scavenger.manifest/1", "checkpoint": "ckpt-0000000120.pt",
     "step": 120, "samples_seen": 7680, "world_size": 2, "global_batch": 64,
     "size": 4412871, "sha256": "...", "time": 1796000000.0}

"checkpoint" is a file name in the manifest's directory; restore() checks the
file against size and sha256. torch is imported when a checkpoint is written or
read, so latest() and read_manifest() work without it.
"""

import hashlib
import json
import os
import random
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import scavenger

__all__ = ["checkpoint", "restore", "latest", "read_manifest", "Restored", "CheckpointError",
           "MANIFEST"]

MANIFEST = "latest.json"
_FORMAT = "scavenger.checkpoint/1"
_MANIFEST_FORMAT = "scavenger.manifest/1"
_NAME = re.compile(r"ckpt-(\d+)\.pt")
_TEMP = re.compile(r"\..+\.\d+\.scavtmp")
_KEYS = ("step", "samples_seen", "world_size", "global_batch", "model", "optimizer",
         "scheduler", "sampler", "rng", "extra")


class CheckpointError(Exception):
    """A checkpoint or manifest that cannot be used; the message names the file and the fault."""


@dataclass(frozen=True)
class Restored:
    """What restore() read besides the states it loaded into the objects given to it."""

    path: str
    step: int
    samples_seen: int
    world_size: int
    global_batch: Optional[int]
    extra: Any


def checkpoint(path_or_dir: str, *, model: Any, optimizer: Any = None, scheduler: Any = None,
               step: int, samples_seen: int, sampler: Any = None, extra: Any = None,
               keep: int = 2) -> str:
    """Write a checkpoint atomically, then the manifest; return the checkpoint's path.

    Call it on every rank at the same step: with a process group up it gathers
    the ranks' RNG states and ends with a barrier, so when it returns the
    checkpoint is durable for all ranks. Only rank 0 writes.

    path_or_dir is a directory (created if need be), where the file is
    ckpt-<step>.pt and only the newest keep such files are kept (older ones are
    deleted after the manifest names the new one); or, when it is an existing
    file or ends with .pt or .pth, the file to write, whose directory gets the
    manifest. Left-over temporary files of an interrupted write in that
    directory are removed first.
    """
    path = _target(path_or_dir, step)
    rngs = _gather(_rng_state())
    if _rank() == 0:
        payload = {"format": _FORMAT, "step": step, "samples_seen": samples_seen,
                   "world_size": _world(), "global_batch": _global_batch(sampler),
                   "model": _unwrap(model).state_dict(),
                   "optimizer": optimizer.state_dict() if optimizer is not None else None,
                   "scheduler": scheduler.state_dict() if scheduler is not None else None,
                   "sampler": sampler.state_dict() if sampler is not None else None,
                   "rng": rngs, "extra": extra}
        _publish(path, payload, keep if os.path.basename(path) == _name(step) else None)
    if _distributed():
        _dist().barrier()
    return path


def restore(path: str, *, model: Any, optimizer: Any = None, scheduler: Any = None,
            sampler: Any = None, verify: bool = True) -> Restored:
    """Load a checkpoint into model, optimizer, scheduler and sampler; set the RNG states.

    path is a checkpoint file or a directory holding a manifest (its latest
    checkpoint). The file is checked against the manifest that names it (size,
    and sha256 unless verify is False). Every rank may call it; tensors are
    loaded to the CPU and then into the objects' own devices. Rank r gets the
    RNG states rank r saved; a rank the saved world did not have gets streams
    seeded from the step and its rank. Raises CheckpointError naming the file
    and what is wrong.
    """
    import torch

    path = _resolve(path)
    _check_against_manifest(path, verify)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # torch raises many kinds for a damaged file
        raise CheckpointError(f"checkpoint {path}: unreadable: {e}") from e
    _check_payload(path, payload)
    _load(path, "model", _unwrap(model), payload)
    for name, target in (("optimizer", optimizer), ("scheduler", scheduler),
                         ("sampler", sampler)):
        if target is not None:
            _load(path, name, target, payload)
    _set_rng_state(payload["rng"], payload["step"])
    return Restored(path=path, step=payload["step"], samples_seen=payload["samples_seen"],
                    world_size=payload["world_size"], global_batch=payload["global_batch"],
                    extra=payload["extra"])


def latest(directory: str) -> Optional[str]:
    """The path of the checkpoint the directory's manifest names, or None when there is none.

    Raises CheckpointError when the manifest is damaged or names a missing file.
    """
    entry = read_manifest(directory)
    if entry is None:
        return None
    path = os.path.join(directory, entry["checkpoint"])
    if not os.path.isfile(path):
        raise CheckpointError(f"manifest {os.path.join(directory, MANIFEST)}: "
                              f"names {entry['checkpoint']!r}, which does not exist")
    return path


def read_manifest(directory: str) -> Optional[dict]:
    """The directory's manifest as a dict, or None when it has none; CheckpointError if damaged."""
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"manifest {path}: unreadable: {e}") from e
    if not isinstance(entry, dict) or entry.get("format") != _MANIFEST_FORMAT:
        raise CheckpointError(f"manifest {path}: not a {_MANIFEST_FORMAT} manifest")
    name = entry.get("checkpoint")
    if not isinstance(name, str) or not name or os.path.basename(name) != name:
        raise CheckpointError(f"manifest {path}: 'checkpoint' must be a file name, got {name!r}")
    return entry


# Writing.

def _target(path_or_dir: str, step: int) -> str:
    """The checkpoint file's path: path_or_dir itself, or ckpt-<step>.pt in that directory."""
    if os.path.isfile(path_or_dir) or path_or_dir.endswith((".pt", ".pth")):
        return path_or_dir
    return os.path.join(path_or_dir, _name(step))


def _name(step: int) -> str:
    """The file name of step's checkpoint in a checkpoint directory."""
    return f"ckpt-{step:010d}.pt"


def _publish(path: str, payload: dict, keep: Optional[int]) -> None:
    """Write the checkpoint, then the manifest naming it, then prune old checkpoints."""
    import torch

    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    _remove_temporaries(directory)
    digest = _atomic_write(path, lambda f: torch.save(payload, f))
    entry = {"format": _MANIFEST_FORMAT, "checkpoint": os.path.basename(path),
             "step": payload["step"], "samples_seen": payload["samples_seen"],
             "world_size": payload["world_size"], "global_batch": payload["global_batch"],
             "size": digest.size, "sha256": digest.hexdigest(), "time": time.time()}
    _atomic_write(os.path.join(directory, MANIFEST),
                  lambda f: f.write(json.dumps(entry, indent=1).encode() + b"\n"))
    if keep is not None:
        _prune(directory, keep)


class _HashingWriter:
    """A binary file wrapper that hashes and counts what is written through it."""

    def __init__(self, file: Any) -> None:
        self._file = file
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        """Write data to the file, adding it to the hash."""
        self._hash.update(data)
        self.size += len(data)
        return self._file.write(data)

    def flush(self) -> None:
        """Flush the file."""
        self._file.flush()

    def hexdigest(self) -> str:
        """The sha256 of everything written so far."""
        return self._hash.hexdigest()


def _atomic_write(path: str, write: Callable[[Any], Any]) -> _HashingWriter:
    """Write a temporary file beside path, fsync it, rename it to path, fsync the directory."""
    directory = os.path.dirname(path) or "."
    temp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.scavtmp")
    try:
        with open(temp, "wb") as f:
            writer = _HashingWriter(f)
            write(writer)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException as e:
        try:
            _remove(temp)
        except OSError as cleanup:  # the write's own error is the one to report
            e.add_note(f"scavenger: could not remove the temporary file {temp}: {cleanup}")
        raise
    _fsync_directory(directory)
    return writer


def _fsync_directory(directory: str) -> None:
    """Make the directory's entries (a rename) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_temporaries(directory: str) -> None:
    """Delete temporary files that a killed writer left in directory."""
    for name in os.listdir(directory):
        if _TEMP.fullmatch(name):
            _remove(os.path.join(directory, name))


def _prune(directory: str, keep: int) -> None:
    """Delete all but the newest keep ckpt-<step>.pt files, never the one the manifest names."""
    named = read_manifest(directory)["checkpoint"]
    files = sorted((n for n in os.listdir(directory) if _NAME.fullmatch(n)),
                   key=lambda n: int(_NAME.fullmatch(n).group(1)))
    for name in files[:-max(1, keep)]:
        if name != named:
            _remove(os.path.join(directory, name))


def _remove(path: str) -> None:
    """Delete a file if it exists."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


# Reading.

def _resolve(path: str) -> str:
    """The checkpoint file that path names: itself, or a directory's latest."""
    if os.path.isdir(path):
        found = latest(path)
        if found is None:
            raise CheckpointError(f"checkpoint directory {path}: no {MANIFEST}")
        return found
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path}: no such file")
    return path


def _check_against_manifest(path: str, verify: bool) -> None:
    """Compare the file with its directory's manifest, when that manifest names it."""
    entry = read_manifest(os.path.dirname(path) or ".")
    if entry is None or entry["checkpoint"] != os.path.basename(path):
        return
    size = os.path.getsize(path)
    if size != entry.get("size"):
        raise CheckpointError(f"checkpoint {path}: {size} bytes, the manifest says "
                              f"{entry.get('size')}: truncated or overwritten")
    if verify and _sha256(path) != entry.get("sha256"):
        raise CheckpointError(f"checkpoint {path}: sha256 differs from the manifest's: corrupt")


def _sha256(path: str) -> str:
    """The sha256 of a file's contents."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_payload(path: str, payload: Any) -> None:
    """Reject what torch.load returned unless it is a checkpoint of this format."""
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise CheckpointError(f"checkpoint {path}: not a {_FORMAT} checkpoint")
    missing = [k for k in _KEYS if k not in payload]
    if missing:
        raise CheckpointError(f"checkpoint {path}: missing {', '.join(missing)}")


def _load(path: str, name: str, target: Any, payload: dict) -> None:
    """target.load_state_dict(payload[name]), with errors naming the file."""
    if payload[name] is None:
        raise CheckpointError(f"checkpoint {path}: holds no {name} state")
    try:
        target.load_state_dict(payload[name])
    except (RuntimeError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path}: cannot load the {name} state: {e}") from e


# Process group and RNG.

def _dist() -> Any:
    """torch.distributed."""
    import torch.distributed as dist
    return dist


def _distributed() -> bool:
    """True when a torch process group is up."""
    dist = _dist()
    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    """The process group's rank, else RANK."""
    return _dist().get_rank() if _distributed() else scavenger.rank()


def _world() -> int:
    """The process group's size, else WORLD_SIZE."""
    return _dist().get_world_size() if _distributed() else scavenger.world_size()


def _global_batch(sampler: Any) -> Optional[int]:
    """The sampler's global batch when it has one, else the environment's."""
    return getattr(sampler, "global_batch", None) or scavenger.global_batch_size()


def _unwrap(model: Any) -> Any:
    """The module inside a DistributedDataParallel (or DataParallel) wrapper."""
    return getattr(model, "module", model)


def _gather(state: dict) -> List[dict]:
    """Every rank's state, in rank order, on rank 0 (a list of one without a group)."""
    if not _distributed() or _world() == 1:
        return [state]
    dist = _dist()
    states = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(state, states, dst=0)
    return states


def _rng_state() -> dict:
    """This process's RNG states: python, numpy (if importable), torch CPU and CUDA."""
    import torch

    np = _numpy()
    return {"python": random.getstate(),
            "numpy": np.random.get_state() if np is not None else None,
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_state(states: List[dict], step: int) -> None:
    """Set this rank's saved RNG states, or seed fresh streams for a rank not saved."""
    import torch

    rank = _rank()
    if rank >= len(states):
        seed = (step << 16) + rank
        random.seed(seed)
        torch.manual_seed(seed)
        if _numpy() is not None:
            _numpy().random.seed(seed % 2**32)
        return
    state = states[rank]
    random.setstate(state["python"])
    if state["numpy"] is not None and _numpy() is not None:
        _numpy().random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available() \
            and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def _numpy() -> Any:
    """The numpy module, or None when it is not installed."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy
